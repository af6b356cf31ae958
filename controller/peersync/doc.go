// Package peersync shares per-endpoint state between the replicas of an active-active
// EPP, over the peer set that peer discovery keeps: the membership is the discovered
// peers, and the transport is the peer-sync port their discovery already names.
//
// Every replica sets its own value for each (state key, endpoint), for example its
// in-flight requests to a model server. Once per interval it pushes what changed to
// every peer, one message per peer: the same bytes for every peer whose connection is
// in step, a full state for a connection that is new or fell behind, an empty message
// as the heartbeat. Get folds this replica's value with the latest value of every
// peer that counts, with the caller's aggregate (a sum, say).
//
// A peer's values count while all of these hold: the peer is in the discovered set,
// the full state of its current connection arrived, and a message came within the
// TTL (3 intervals by default). When one ends, all of that peer's values stop
// counting at once: values are tagged with the generation of the full state that
// brought them, and Get counts a value only if its generation is the peer's
// generation in force. A restarted peer opens a new connection whose full state
// replaces the old generation whole, so its old values are never counted beside its
// new ones.
//
// Only the discovered peers may push: a connection must come from a peer's address,
// and its hello must name the peer discovery lists there; mutual TLS can be added,
// and can bind a certificate to the replica it names. A connection from an address
// discovery does not list yet waits for it until the handshake timeout. Before
// admission, connections are bounded in all and per source, and the hello is read
// unbuffered and capped. Messages, values, keys and entries (by what the pool can
// have) are bounded; what breaks a bound or does not decode is a counted rejection,
// never a crash, and an accept error is retried: the syncer never stops on one.
//
// Values are encoded by their Go type, and decoded into the type of this replica's
// own values of the key, so that an aggregate's type assertions hold: a struct of
// scalar fields (matched by name, so versions with added fields interoperate) as
// varints, a type with its own binary marshalling as its bytes, anything else as
// JSON. Keys and endpoints are named once per connection and referred to by index,
// so a delta costs a few bytes per changed value.
//
// Get takes no lock and decodes nothing: peers' values are decoded into the local
// type when they arrive; the key table, the membership and each value are immutable
// snapshots swapped by atomic pointers, and no lock is held while the aggregate runs.
package peersync
