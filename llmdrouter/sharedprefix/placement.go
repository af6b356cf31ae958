package sharedprefix

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A placement is what the peers learn of one routing decision, or one part of a
// snapshot: the server, the sender's capacity for it (for the record: a peer
// never sizes its index by it, it counts a difference), when it was decided, and
// ops on the server's LRU in order. Encoded (version 2):
//
//	version (1 byte, placementVersion)
//	server ID (uvarint length, bytes)
//	capacity (uvarint)
//	decided at (uvarint, unix microseconds; 0 in a snapshot)
//	ops (uvarint count), each a kind byte and:
//	  add:   parent (8 bytes), hashes (uvarint count, 8 bytes each): blocks new
//	         to the sender's index, each the most recent in turn, the first one's
//	         parent given (0 for a prompt's first block), each next one's the one
//	         before it
//	  touch: last (8 bytes), count (uvarint): blocks the sender held already,
//	         the chain of count blocks that ends at last (walked back through the
//	         parents), made the most recent, its first block first
//	  older: entries (uvarint count, 16 bytes each: hash, parent): a snapshot's
//	         blocks, the most recent first, each added as the least recent
//
// All numbers are little endian. Version 1 (a server, a capacity, a time and the
// new hashes) is still read: a replica of the version before takes part in a
// rolling upgrade.
type placement struct {
	server   string
	capacity int
	at       int64 // unix µs
	ops      []op
}

type opKind byte

const (
	opAdd   opKind = 1
	opTouch opKind = 2
	opOlder opKind = 3
)

type op struct {
	kind opKind
	// ref: add, the parent of the first hash; touch, the last block of the chain.
	ref blockHash
	// n: touch, the chain's length.
	n int
	// hashes: add, the new hashes in order; older, hash and parent pairs.
	hashes []blockHash
}

const (
	placementVersion1 = 1
	placementVersion  = 2
)

// Bounds of a placement message.
const (
	maxServerIDBytes = 253 + 1 + 63 + 16 // namespace/name plus a rank suffix
	maxCapacity      = 1 << 24
	// maxHashesPerMessage keeps a message under the broadcast's limit
	// (peersync.DefaultBroadcastMaxMessageBytes): hashes added, and twice the
	// entries of a snapshot.
	maxHashesPerMessage = 7 << 10
	// maxTouchPerMessage bounds the blocks one message may touch (a prompt of
	// 131,072 tokens is 2,048 blocks of 64).
	maxTouchPerMessage = 1 << 14
	// maxOpsPerMessage bounds the ops of one message.
	maxOpsPerMessage = 1 << 12
)

var errMalformedPlacement = errors.New("malformed placement")

// cost is the work a placement asks of the index: the blocks it adds or touches.
func (p *placement) cost() int {
	n := 0
	for _, o := range p.ops {
		n += len(o.hashes) + o.n
	}
	return n
}

// snapshotOnly reports whether p carries what only a snapshot may: older blocks,
// or no time.
func (p *placement) snapshotOnly() bool {
	if p.at == 0 {
		return true
	}
	for _, o := range p.ops {
		if o.kind == opOlder {
			return true
		}
	}
	return false
}

// encodePlacement is p on the wire (parsePlacement reads it).
func encodePlacement(p *placement) []byte {
	dst := []byte{placementVersion}
	dst = binary.AppendUvarint(dst, uint64(len(p.server)))
	dst = append(dst, p.server...)
	dst = binary.AppendUvarint(dst, uint64(p.capacity))
	dst = binary.AppendUvarint(dst, uint64(max(p.at, 0)))
	dst = binary.AppendUvarint(dst, uint64(len(p.ops)))
	for _, o := range p.ops {
		dst = append(dst, byte(o.kind))
		switch o.kind {
		case opAdd:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(o.ref))
			dst = binary.AppendUvarint(dst, uint64(len(o.hashes)))
		case opTouch:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(o.ref))
			dst = binary.AppendUvarint(dst, uint64(o.n))
		case opOlder:
			dst = binary.AppendUvarint(dst, uint64(len(o.hashes)/2))
		}
		for _, h := range o.hashes {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
		}
	}
	return dst
}

// placementReader reads a placement's primitives; the first error sticks.
type placementReader struct {
	b    []byte
	fail string
}

func (r *placementReader) uvarint(what string) uint64 {
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

func (r *placementReader) hash(what string) blockHash {
	if r.fail != "" {
		return 0
	}
	if len(r.b) < 8 {
		r.fail = what
		return 0
	}
	h := blockHash(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return h
}

// hashes appends n hashes to into, refusing more than the bytes left hold.
func (r *placementReader) hashes(n uint64, into []blockHash, what string) []blockHash {
	if r.fail != "" {
		return into
	}
	if n > uint64(len(r.b))/8 {
		r.fail = what
		return into
	}
	for range n {
		into = append(into, blockHash(binary.LittleEndian.Uint64(r.b)))
		r.b = r.b[8:]
	}
	return into
}

// parsePlacement decodes b into p, reusing p's slices. It refuses what breaks a
// bound, before allocating for it.
func parsePlacement(p *placement, b []byte) error {
	if len(b) == 0 || (b[0] != placementVersion && b[0] != placementVersion1) {
		return fmt.Errorf("%w: not version 1 or 2", errMalformedPlacement)
	}
	version := b[0]
	r := placementReader{b: b[1:]}
	n := r.uvarint("server ID")
	if r.fail == "" && (n == 0 || n > maxServerIDBytes || n > uint64(len(r.b))) {
		r.fail = "server ID"
	}
	if r.fail != "" {
		return fmt.Errorf("%w: %s", errMalformedPlacement, r.fail)
	}
	server := r.b[:n]
	r.b = r.b[n:]
	capacity := r.uvarint("capacity")
	if r.fail == "" && (capacity == 0 || capacity > maxCapacity) {
		r.fail = "capacity"
	}
	at := r.uvarint("time")
	if r.fail == "" && at > 1<<62 {
		r.fail = "time"
	}
	// Reuse the ops and their hashes.
	ops := p.ops[:0]
	next := func(kind opKind) *op {
		if len(ops) < cap(ops) {
			ops = ops[:len(ops)+1]
		} else {
			ops = append(ops, op{})
		}
		o := &ops[len(ops)-1]
		*o = op{kind: kind, hashes: o.hashes[:0]}
		return o
	}
	if version == placementVersion1 {
		count := r.uvarint("hashes")
		if r.fail == "" && (count > maxHashesPerMessage || uint64(len(r.b)) != count*8) {
			r.fail = "hashes"
		}
		if r.fail == "" && count > 0 {
			if at == 0 {
				// A snapshot of version 1: the oldest first, parents unknown.
				o := next(opOlder)
				hs := r.hashes(count, nil, "hashes")
				for i := len(hs) - 1; i >= 0; i-- {
					o.hashes = append(o.hashes, hs[i], 0)
				}
			} else {
				o := next(opAdd)
				o.hashes = r.hashes(count, o.hashes, "hashes")
			}
		}
	} else {
		nops := r.uvarint("ops")
		if r.fail == "" && (nops > maxOpsPerMessage || nops > uint64(len(r.b))) {
			r.fail = "ops"
		}
		hashes, touched := 0, 0
		for i := uint64(0); i < nops && r.fail == ""; i++ {
			if len(r.b) == 0 {
				r.fail = "op"
				break
			}
			kind := opKind(r.b[0])
			r.b = r.b[1:]
			switch kind {
			case opAdd:
				o := next(opAdd)
				o.ref = r.hash("add")
				c := r.uvarint("add")
				if hashes += int(min(c, 1<<32)); hashes > maxHashesPerMessage || c == 0 {
					r.fail = "add"
				}
				o.hashes = r.hashes(c, o.hashes, "add")
			case opTouch:
				o := next(opTouch)
				o.ref = r.hash("touch")
				c := r.uvarint("touch")
				if touched += int(min(c, 1<<32)); touched > maxTouchPerMessage || c == 0 {
					r.fail = "touch"
				}
				o.n = int(c)
			case opOlder:
				o := next(opOlder)
				c := r.uvarint("older")
				if hashes += 2 * int(min(c, 1<<31)); hashes > maxHashesPerMessage || c == 0 {
					r.fail = "older"
				}
				o.hashes = r.hashes(2*c, o.hashes, "older")
			default:
				r.fail = "op kind"
			}
		}
		if r.fail == "" && len(r.b) != 0 {
			r.fail = "trailing bytes"
		}
	}
	if r.fail != "" {
		p.ops = ops[:0]
		return fmt.Errorf("%w: %s", errMalformedPlacement, r.fail)
	}
	p.server, p.capacity, p.at, p.ops = string(server), int(capacity), int64(at), ops
	return nil
}

// PlacementOverOtherPrompts is a placement message (what a peer publishes on the
// broadcast named BroadcastName) with every block hash mixed with salt, and the
// rest as it was: the same decision over other prompts. A bench that stands in for
// a replica's peers publishes the replica's own placements again this way, so that
// their blocks are new to its index, as other prompts' would be, and each peer's
// chains hold together (a first block's parent stays 0).
func PlacementOverOtherPrompts(msg []byte, salt uint64) ([]byte, error) {
	var p placement
	if err := parsePlacement(&p, msg); err != nil {
		return nil, err
	}
	mix := func(h blockHash) blockHash {
		if h == 0 {
			return 0
		}
		return h ^ blockHash(salt)
	}
	for i := range p.ops {
		o := &p.ops[i]
		o.ref = mix(o.ref)
		for j := range o.hashes {
			o.hashes[j] = mix(o.hashes[j])
		}
	}
	return encodePlacement(&p), nil
}
