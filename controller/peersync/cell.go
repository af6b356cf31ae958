package peersync

import (
	"sync/atomic"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// MaxValueBytesLimit is the largest maxValueBytes accepted.
const MaxValueBytesLimit = 1<<22 - 2

// cell is one peer's value of one slot: the latest value the peer sent, written by
// that peer's connection only (Syncer.apply under the peer's apply lock, or the
// decoding of a key that got its local type) and read by any number of Gets without
// a lock. A cell is one pointer: a slot's cells for all peers lie side by side.
type cell = atomic.Pointer[peerValue]

// peerValue is a value as it arrived, immutable once stored. It is decoded on
// receive, into the type of this replica's values of the key, so that Get only
// loads it; until this replica has a value of the key (no local type yet), it keeps
// the peer's bytes, decoded when the local type is known.
type peerValue struct {
	gen uint64 // the generation the value belongs to
	at  int64  // arrival, unix ns
	// v is the value decoded as the local type (nil: not decoded, see raw and err).
	v any
	// raw is the peer's encoding, kept only while no local type decodes it.
	raw []byte
	key *inKey // how the peer encodes the key's values, for a later decoding
	// err is why the bytes do not decode as the local type (a counted rejection).
	err error
}

func newCells(n int) []cell { return make([]cell, n) }

// counts reports whether the value counts for a member whose generation in force
// is gen.
func (p *peerValue) counts(gen uint64) bool { return p != nil && p.gen == gen && p.v != nil }

// decodeAs decodes raw, encoded by the peer's key k, as the local type lc.
func decodeAs(k *inKey, lc *wire.Codec, raw []byte) (any, error) {
	return k.planFor(lc).Decode(k.rk, raw)
}
