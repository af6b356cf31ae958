// Package dnssrv is the headless-DNS peer source: it asks DNS for the SRV records of
// the peer port of a headless Service (_peer-sync._tcp.<service>.<namespace>.svc...)
// every interval, and publishes the targets, resolved to addresses, as the peers.
//
// It is for clusters where the EPP may not read EndpointSlices: it needs no RBAC at
// all, only cluster DNS. It pays for that in speed and detail. Cluster DNS lists a
// headless Service's ready endpoints (and, with publishNotReadyAddresses, the others
// too, with nothing to tell them apart), so every peer it gives is ready; and
// answers may be cached (CoreDNS's cache plugin, 30 s by default), so a change shows
// after up to the cache time plus one interval, where the EndpointSlice source takes
// milliseconds.
//
// A name that does not exist (NXDOMAIN), which is what DNS answers for a Service
// with no ready endpoints, is an empty peer set. A lookup that fails otherwise (no
// answer in time, a server failure) keeps the last good set and makes the view
// stale (reason "lookup") until a lookup succeeds.
//
// A peer's identity is namespace/<first label of its SRV target>: the Pod's host name
// when it has one (a StatefulSet's Pods), else the dashed address CoreDNS makes up
// (10-244-0-5). The replica recognizes itself by its addresses (POD_IP, POD_IPS).
package dnssrv
