// Package peers is the API between peer discovery and the code that consumes it.
//
// A source (EndpointSlices, a peers file) computes the complete set of peer replicas
// and hands it to a Tracker, which diffs it against the set it published last and sends
// only the real changes to a PeerNotifier. MemoryPeerStore is the notifier most
// consumers want: a concurrency-safe, ordered view of the peers that a consumer can
// block on, seeing the latest set after every change rather than a backlog of events.
package peers
