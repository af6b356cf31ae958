// Package discovery is the seam between peer sources and what consumes their peers.
//
// A Source (EndpointSlices, a peers file, ...) computes complete peer sets and hands
// each to the Publisher it was built with. The Publisher is the one place where a set
// becomes a change: it diffs the set against the one published last, sends only the
// difference to a peers.PeerNotifier (a peers.MemoryPeerStore, usually), updates the
// metrics, logs the change, and keeps the source's status: whether its first complete
// read was published (Ready) and the last error it met.
//
// PeerDiscovery runs one Source for a host program in the shape the EPP ecosystem
// uses for plugins: SetupWithManager joins the host's controller-runtime manager
// (for sources that need one), Start delivers the peers to the host's notifier from
// one goroutine, and Ready is closed after the initial reconciliation.
package discovery
