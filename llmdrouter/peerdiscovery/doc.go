// Package peerdiscovery is peer discovery as plugins of llm-d-router's EPP: each
// implements the EPP's datalayer.PeerDiscovery (Start with the EPP's PeerNotifier,
// Ready), and needs nothing else: a source that reads Kubernetes loads its client
// configuration itself (controller-runtime's loader: $KUBECONFIG, then in-cluster)
// and runs a reflector of its own scoped to what it reads, so its namespaced Role is
// all the RBAC it adds.
//
// Register registers one plugin type for every peer source of the project
// (sources.All: the list the epp binary takes its flags from), named
// "<source>-peer-discovery", with stability Beta (as the EPP's own
// endpoint-discovery plugins are: no --allow-experimental-plugins needed):
// endpointslice-peer-discovery (the EPP Service's EndpointSlices),
// file-peer-discovery (a peers file) and dns-peer-discovery (the SRV records of a
// headless peer Service, no RBAC), and any source added to that list. Factory
// builds a type's plugins: its parameters are the source's settings as its
// discovery.SourceSpec declares them, each falling back to its environment
// variables, then its default, checked with the words of the epp binary's flags;
// plus the Extras every type shares (debugAddress, probeInterval,
// peerSyncAddress).
//
// Every plugin serves its peer view, the /debug/peers document, through the EPP's
// plugin state endpoint (/debug/plugins/state on the metrics port, DumpState), and
// also on debugAddress when that is set. Its metrics carry discovery=<plugin name>
// and are registered in the registry the EPP serves on /metrics.
package peerdiscovery
