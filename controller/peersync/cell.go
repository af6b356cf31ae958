package peersync

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// inlineWords is how many 8-byte words of a value a cell holds in place (an
// in-flight load takes a few bytes); longer values are held in a slice of their own.
const inlineWords = 2

// MaxValueBytesLimit is the largest maxValueBytes a cell can describe.
const MaxValueBytesLimit = 1<<metaLenBits - 2

// A cell's meta word: the value's length + 1 (0: no value) in the low bits, and when
// it arrived, in unix milliseconds, in the rest.
const metaLenBits = 22

func packMeta(n int, at int64) uint64 {
	return uint64(at/1e6)<<metaLenBits | uint64(n+1)
}

func unpackMeta(m uint64) (n int, at int64) {
	return int(m&(1<<metaLenBits-1)) - 1, int64(m>>metaLenBits) * 1e6
}

// cell is one peer's value of one slot, written in place by that peer's connection
// only (Syncer.apply under the peer's apply lock) and read by any number of Gets
// without a lock: a sequence lock, every field atomic. The writer makes seq odd,
// writes, makes it even again; a reader that saw the same even seq before and after
// its reads has a consistent value. Receiving a value therefore allocates nothing;
// the first read after a change decodes it (into the type of this replica's values)
// and keeps the result for the reads after it. A cell is 64 bytes, one cache line: a
// slot's cells for all peers lie side by side.
type cell struct {
	seq  atomic.Uint64
	dec  atomic.Pointer[decodedValue] // the last decoding, for the seq it was made at
	gen  atomic.Uint64                // the generation the value belongs to
	meta atomic.Uint64                // length and arrival (packMeta)
	w    [inlineWords]atomic.Uint64
	big  atomic.Pointer[[]byte] // a value longer than the words
	key  atomic.Pointer[wire.RemoteKey]
}

type decodedValue struct {
	seq   uint64 // the cell's seq when it was decoded: valid while the seq stays so
	gen   uint64
	at    int64
	local *wire.Codec
	v     any
	err   error
}

func newCells(n int) []cell { return make([]cell, n) }

// write stores a value of generation gen. Stores are full barriers on most
// machines: fields that keep their value are only loaded, and only the words the
// value needs are written.
func (c *cell) write(gen uint64, key *wire.RemoteKey, raw []byte, at int64) {
	s := c.seq.Load()
	c.seq.Store(s + 1)
	if c.gen.Load() != gen {
		c.gen.Store(gen)
	}
	if c.key.Load() != key {
		c.key.Store(key)
	}
	if len(raw) <= inlineWords*8 {
		var buf [inlineWords * 8]byte
		copy(buf[:], raw)
		for i := range (len(raw) + 7) / 8 {
			c.w[i].Store(binary.LittleEndian.Uint64(buf[i*8:]))
		}
		if c.big.Load() != nil {
			c.big.Store(nil)
		}
	} else {
		b := append([]byte(nil), raw...)
		c.big.Store(&b)
	}
	c.meta.Store(packMeta(len(raw), at))
	c.seq.Store(s + 2)
}

// clear removes the value (the peer deleted it).
func (c *cell) clear() {
	s := c.seq.Load()
	c.seq.Store(s + 1)
	c.meta.Store(0)
	c.big.Store(nil)
	c.seq.Store(s + 2)
}

// copyFrom copies o's value (growing the cells; writers are excluded).
func (c *cell) copyFrom(o *cell) {
	c.seq.Store(o.seq.Load())
	c.dec.Store(o.dec.Load())
	c.gen.Store(o.gen.Load())
	c.meta.Store(o.meta.Load())
	for i := range inlineWords {
		c.w[i].Store(o.w[i].Load())
	}
	c.big.Store(o.big.Load())
	c.key.Store(o.key.Load())
}

// read returns the value if it belongs to generation gen, decoded as local, and
// when it arrived. Get has this function's first lines inline (it is too large to
// be inlined).
func (c *cell) read(gen uint64, local *wire.Codec) (any, int64, bool) {
	// The common case: decoded already, and not written since (a decoding is made
	// from a consistent read at its seq, and every write moves the seq).
	if d := c.dec.Load(); d != nil && d.seq == c.seq.Load() && d.local == local {
		return d.v, d.at, d.gen == gen && d.err == nil
	}
	return c.readSlow(gen, local)
}

// load reads the value's bytes, generation and arrival consistently; raw is in buf
// (or the cell's own slice for a long value).
func (c *cell) load(buf *[inlineWords * 8]byte) (seq, gen uint64, raw []byte, key *wire.RemoteKey, at int64, ok bool) {
	for spins := 0; ; spins++ {
		s1 := c.seq.Load()
		if s1&1 != 0 {
			if spins > 16 {
				runtime.Gosched()
			}
			continue
		}
		gen = c.gen.Load()
		n, a := unpackMeta(c.meta.Load())
		key = c.key.Load()
		raw = nil
		if n >= 0 && n <= inlineWords*8 {
			for i := range inlineWords {
				binary.LittleEndian.PutUint64(buf[i*8:], c.w[i].Load())
			}
			raw = buf[:n]
		} else if b := c.big.Load(); n >= 0 && b != nil {
			raw = *b
		}
		if c.seq.Load() != s1 {
			continue
		}
		return s1, gen, raw, key, a, n >= 0 && key != nil && (n <= inlineWords*8 || raw != nil)
	}
}

// readSlow reads the value under the sequence lock and decodes it.
func (c *cell) readSlow(gen uint64, local *wire.Codec) (any, int64, bool) {
	var buf [inlineWords * 8]byte
	seq, g, raw, key, at, ok := c.load(&buf)
	if !ok || g != gen {
		return nil, 0, false
	}
	v, err := key.PlanFor(local).Decode(key, raw)
	c.dec.Store(&decodedValue{seq: seq, gen: g, at: at, local: local, v: v, err: err})
	return v, at, err == nil
}

// raw returns the value's bytes if it belongs to generation gen (for the document,
// where no local type decodes it).
func (c *cell) raw(gen uint64) ([]byte, int64, bool) {
	var buf [inlineWords * 8]byte
	_, g, raw, _, at, ok := c.load(&buf)
	if !ok || g != gen {
		return nil, 0, false
	}
	return append([]byte(nil), raw...), at, true
}

// holds reports whether the cell has a value of one of the generations.
func (c *cell) holds(valid map[uint64]bool) bool {
	return c.meta.Load() != 0 && valid[c.gen.Load()]
}
