// Package discovery is the seam between peer sources and what consumes their peers.
//
// A Source (EndpointSlices, a peers file, DNS SRV records, ...) reads its peers and
// hands every complete set, or every change it computed, to the Publisher it was
// built with, and reports what stops it with Publisher.Fail. The Publisher is the one
// place for what all sources share: it leaves this replica out, turns a set into the
// difference to the last one for a peers.PeerNotifier (a peers.MemoryPeerStore,
// usually), updates the metrics (labelled with the discovery's instance name), logs
// the change, and keeps the source's status with one policy: a failure before the
// first complete set keeps the source not ready and says why; a failure after it
// makes the view stale, with the last good set kept, until the next complete read.
//
// A program configured by flags (the epp binary) knows its sources by SourceSpec:
// the flag that selects a source, its own flags and failure reasons, and how to
// check and build it.
//
// PeerDiscovery runs one Source for a host program in the plugin shape of
// llm-d-router's EPP: Start delivers the peers to the host's notifier from one
// goroutine, and Ready is closed once the notifier holds the initial set.
package discovery
