package sharedprefix

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A placement is what the peers learn of one routing decision: the server, the
// sender's capacity for it (for the record: a peer never sizes its index by it,
// it counts a difference), when it was decided, and the request's block hashes,
// every one of them, from a position on (each block's stamp is the decision's time
// and its position: stampOf). A peer merges them as this replica did: blocks it
// lacks are added, blocks it holds take the newer stamp. Encoded (version 3):
//
//	version (1 byte, placementVersion)
//	server ID (uvarint length, bytes)
//	capacity (uvarint)
//	decided at (uvarint, unix microseconds)
//	first position (uvarint): the position in the prompt of the first hash
//	hashes (uvarint count, 8 bytes each, little endian)
//
// Versions 1 and 2 (new hashes and touches of chains, kept in step by the
// broadcast's log) are not read: replicas of that version and of this one do not
// exchange placements (their broadcasts do not meet: see wire.FeatureExchange).
type placement struct {
	server   string
	capacity int
	at       int64 // unix µs
	first    int
	hashes   []blockHash
}

const placementVersion = 3

// Bounds of a placement message.
const (
	maxServerIDBytes = 253 + 1 + 63 + 16 // namespace/name plus a rank suffix
	maxCapacity      = 1 << 24
	// maxHashesPerMessage keeps a message under the broadcast's limit
	// (peersync.DefaultBroadcastMaxMessageBytes).
	maxHashesPerMessage = 7 << 10
	// maxMicros bounds a time: a stamp has 12 bits for the position below it.
	maxMicros = 1 << 51
)

var errMalformedPlacement = errors.New("malformed placement")

// encodePlacement is p on the wire (parsePlacement reads it).
func encodePlacement(p *placement) []byte {
	dst := make([]byte, 0, 1+binary.MaxVarintLen64*5+len(p.server)+8*len(p.hashes))
	dst = append(dst, placementVersion)
	dst = binary.AppendUvarint(dst, uint64(len(p.server)))
	dst = append(dst, p.server...)
	dst = binary.AppendUvarint(dst, uint64(p.capacity))
	dst = binary.AppendUvarint(dst, uint64(max(p.at, 0)))
	dst = binary.AppendUvarint(dst, uint64(p.first))
	dst = binary.AppendUvarint(dst, uint64(len(p.hashes)))
	for _, h := range p.hashes {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
	}
	return dst
}

// reader reads the primitives of this package's messages; the first error sticks.
type reader struct {
	b    []byte
	fail string
}

func (r *reader) uvarint(what string) uint64 {
	if r.fail != "" {
		return 0
	}
	x, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail = what
		return 0
	}
	r.b = r.b[k:]
	return x
}

// bounded reads a uvarint of at most limit (0, failed, when it is more).
func (r *reader) bounded(what string, limit uint64) uint64 {
	x := r.uvarint(what)
	if r.fail == "" && x > limit {
		r.fail = what
	}
	if r.fail != "" {
		return 0
	}
	return x
}

func (r *reader) fixed64(what string) uint64 {
	if r.fail != "" {
		return 0
	}
	if len(r.b) < 8 {
		r.fail = what
		return 0
	}
	x := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return x
}

// name reads a length-prefixed name of 1 to limit bytes (a subslice).
func (r *reader) name(what string, limit int) []byte {
	n := r.uvarint(what)
	if r.fail == "" && (n == 0 || n > uint64(limit) || n > uint64(len(r.b))) {
		r.fail = what
	}
	if r.fail != "" {
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) err() error {
	if r.fail == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", errMalformedPlacement, r.fail)
}

// parsePlacement decodes b into p, reusing p's slice. It refuses what breaks a
// bound, before allocating for it: every byte of a placement is a byte of a hash
// or of its header, so what merging it costs is in proportion to its size.
func parsePlacement(p *placement, b []byte) error {
	if len(b) == 0 || b[0] != placementVersion {
		return fmt.Errorf("%w: not version %d", errMalformedPlacement, placementVersion)
	}
	r := reader{b: b[1:]}
	server := r.name("server ID", maxServerIDBytes)
	capacity := r.bounded("capacity", maxCapacity)
	if r.fail == "" && capacity == 0 {
		r.fail = "capacity"
	}
	at := r.bounded("time", maxMicros)
	if r.fail == "" && at == 0 {
		r.fail = "time"
	}
	first := r.bounded("first position", maxPosition)
	count := r.bounded("hashes", maxHashesPerMessage)
	if r.fail == "" && (count == 0 || uint64(len(r.b)) != count*8) {
		r.fail = "hashes"
	}
	if err := r.err(); err != nil {
		return err
	}
	hs := p.hashes[:0]
	for range count {
		hs = append(hs, blockHash(binary.LittleEndian.Uint64(r.b)))
		r.b = r.b[8:]
	}
	p.server, p.capacity, p.at, p.first, p.hashes = string(server), int(capacity), int64(at), int(first), hs
	return nil
}

// PlacementOverOtherPrompts is a placement message (what a peer publishes on the
// broadcast named BroadcastName) with every block hash mixed with salt, and the
// rest as it was: the same decision over other prompts. A bench that stands in for
// a replica's peers publishes the replica's own placements again this way, so that
// their blocks are new to its index, as other prompts' would be.
func PlacementOverOtherPrompts(msg []byte, salt uint64) ([]byte, error) {
	var p placement
	if err := parsePlacement(&p, msg); err != nil {
		return nil, err
	}
	for i := range p.hashes {
		p.hashes[i] ^= blockHash(salt)
	}
	return encodePlacement(&p), nil
}
