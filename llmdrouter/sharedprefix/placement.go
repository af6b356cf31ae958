package sharedprefix

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A placement is one routing decision as the peers learn it: the server a request
// went to, the server's capacity in blocks, when it was decided, and the block
// hashes that were new to the server in the deciding replica's index. Encoded:
//
//	version (1 byte, placementVersion)
//	server ID (uvarint length, bytes)
//	capacity (uvarint)
//	decided at (uvarint, unix microseconds; 0 in a snapshot)
//	hashes (uvarint count, then 8 bytes each, little endian)
//
// A snapshot is the same messages, one per server and chunk of hashes, oldest
// first.
type placement struct {
	server   string
	capacity int
	at       int64 // unix µs
	hashes   []blockHash
}

const placementVersion = 1

// Bounds of a placement message.
const (
	maxServerIDBytes = 253 + 1 + 63 + 16 // namespace/name plus a rank suffix
	maxCapacity      = 1 << 24
	// maxHashesPerMessage keeps a message under the broadcast's limit
	// (peersync.DefaultBroadcastMaxMessageBytes).
	maxHashesPerMessage = 7 << 10
)

var errMalformedPlacement = errors.New("malformed placement")

func appendPlacement(p placement) []byte {
	dst := make([]byte, 0, 1+1+len(p.server)+3+8+2+8*len(p.hashes))
	dst = append(dst, placementVersion)
	dst = binary.AppendUvarint(dst, uint64(len(p.server)))
	dst = append(dst, p.server...)
	dst = binary.AppendUvarint(dst, uint64(p.capacity))
	dst = binary.AppendUvarint(dst, uint64(max(p.at, 0)))
	dst = binary.AppendUvarint(dst, uint64(len(p.hashes)))
	for _, h := range p.hashes {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
	}
	return dst
}

// parsePlacement decodes b into p, reusing p.hashes. It refuses what breaks a bound.
func parsePlacement(p *placement, b []byte) error {
	fail := func(what string) error { return fmt.Errorf("%w: %s", errMalformedPlacement, what) }
	if len(b) == 0 || b[0] != placementVersion {
		return fail("not version 1")
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > maxServerIDBytes || uint64(len(b)-k) < n {
		return fail("server ID")
	}
	server := b[k : k+int(n)]
	b = b[k+int(n):]
	capacity, k := binary.Uvarint(b)
	if k <= 0 || capacity == 0 || capacity > maxCapacity {
		return fail("capacity")
	}
	b = b[k:]
	at, k := binary.Uvarint(b)
	if k <= 0 || at > 1<<62 {
		return fail("time")
	}
	b = b[k:]
	count, k := binary.Uvarint(b)
	if k <= 0 || count > maxHashesPerMessage || uint64(len(b)-k) != count*8 {
		return fail("hashes")
	}
	b = b[k:]
	p.server, p.capacity, p.at = string(server), int(capacity), int64(at)
	p.hashes = p.hashes[:0]
	for i := range int(count) {
		p.hashes = append(p.hashes, blockHash(binary.LittleEndian.Uint64(b[i*8:])))
	}
	return nil
}
