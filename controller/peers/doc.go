// Package peers is the API between peer discovery and the code that consumes it.
//
// PeerMetadata is one peer replica: its identity (namespace/name), where to reach it,
// and its ready, serving and terminating conditions. Self is the replica that
// discovers, and Self.Is the one rule every source uses to leave it out; Membership
// says which endpoints count as peers (ready ones, or also not-ready ones).
//
// A source's complete peer sets become changes in a Tracker (through a
// discovery.Publisher), which sends only the difference to a PeerNotifier.
// MemoryPeerStore is the notifier most consumers want: a concurrency-safe, ordered
// view of the peers that a consumer can block on with WaitForChange, seeing the latest
// set after every change rather than a backlog of events, or follow with Follow,
// which feeds another notifier from one goroutine, in order.
package peers
