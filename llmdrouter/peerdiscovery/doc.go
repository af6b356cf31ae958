// Package peerdiscovery is peer discovery as plugins of llm-d-router's EPP: each
// implements the EPP's datalayer.PeerDiscovery (Start with the EPP's PeerNotifier,
// Ready), and needs nothing else: it loads its Kubernetes client configuration
// itself (controller-runtime's loader: $KUBECONFIG, then in-cluster) and runs a
// reflector of its own scoped to the peer Service's EndpointSlices, so the
// namespaced endpointslices Role is all the RBAC it adds.
//
// Two plugin types, registered by Register with stability Beta (as the EPP's own
// endpoint-discovery plugins are: no --allow-experimental-plugins needed):
//
//   - endpointslice-peer-discovery: the EPP Service's EndpointSlices. Parameters:
//     service (required), namespace, portName, port, membership, debugAddress.
//   - dns-peer-discovery: the SRV records of a headless peer Service, for clusters
//     where the EPP may not read EndpointSlices (no RBAC). Parameters: name
//     (required), namespace, interval, server, debugAddress.
//
// Parameters are checked with the words of the epp binary's flags. Every plugin
// serves its peer view, the /debug/peers document, through the EPP's plugin state
// endpoint (/debug/plugins/state on the metrics port, DumpState), and also on
// debugAddress when that is set. Its metrics carry discovery=<plugin name> and are
// registered in the registry the EPP serves on /metrics.
package peerdiscovery
