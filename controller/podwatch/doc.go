// Package podwatch is the pod peer source: the peers are the EPP's own pods,
// selected by a label selector in the namespace and read from the Pod API, for EPPs
// whose Role already reads pods (llm-d-router's EPP watches its model servers' pods)
// and that have no Service of their own to read EndpointSlices of.
//
// A pod is a peer when it has an IP and, by the membership, is ready (its Ready
// condition is True) and not terminating (no deletion timestamp, not Succeeded or
// Failed); with membership alive, not-ready pods are peers too. Its identity is
// namespace/<pod name>; its address the pod IP of this replica's family (that of
// POD_IP, else the first of POD_IPS), else its first one; its port the container
// port named by the port name setting, else the port setting. This replica is left
// out by name or address, and says whether its own pod counts by the same rule
// (discovery.Publisher.SetSelfListed), which its peers apply to it.
//
// The pods come from a client-go reflector of its own, scoped to the namespace and
// the selector, with the health checks and staleness of package kubewatch: a
// namespaced Role with get, list and watch on pods is all the RBAC it needs. Every
// pod event recomputes the set from the pods held (a handful: the EPP's replicas)
// and publishes it whole; the Publisher sends only the difference.
//
// The epp binary selects it with --epp-peer-pod-selector; llm-d-router's EPP with
// the plugin type pod-peer-discovery and its parameter selector.
package podwatch
