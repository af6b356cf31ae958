package peersync

import (
	"runtime"
	"sync/atomic"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// inlineWords is how many 8-byte words of a value a cell holds in place; longer
// values are held in a slice of their own.
const inlineWords = 4

// cell is one peer's value of one slot, written in place by that peer's connection
// only (Syncer.apply under the peer's apply lock) and read by any number of Gets
// without a lock: a sequence lock, every field atomic. The writer makes seq odd,
// writes, makes it even again; a reader that saw the same even seq before and after
// its reads has a consistent value. Receiving a value therefore allocates nothing;
// the first read after a change decodes it (into the type of this replica's values)
// and keeps the result for the reads after it.
type cell struct {
	seq atomic.Uint64
	gen atomic.Uint64 // the generation the value belongs to
	at  atomic.Int64  // when it arrived, unix ns
	n   atomic.Int32  // its length; -1: no value
	w   [inlineWords]atomic.Uint64
	big atomic.Pointer[[]byte] // a value longer than the words
	key atomic.Pointer[wire.RemoteKey]
	dec atomic.Pointer[decodedValue] // the last decoding, for the seq it was made at
}

type decodedValue struct {
	seq   uint64 // the cell's seq when it was decoded: valid while the seq stays so
	gen   uint64
	at    int64
	local *wire.Codec
	v     any
	err   error
}

func newCells(n int) []cell {
	cs := make([]cell, n)
	for i := range cs {
		cs[i].n.Store(-1)
	}
	return cs
}

// write stores a value of generation gen.
// Stores are full barriers on most machines: fields that keep their value are
// only loaded, and only the words the value needs are written.
func (c *cell) write(gen uint64, key *wire.RemoteKey, raw []byte, at int64) {
	s := c.seq.Load()
	c.seq.Store(s + 1)
	if c.gen.Load() != gen {
		c.gen.Store(gen)
	}
	c.at.Store(at)
	if c.key.Load() != key {
		c.key.Store(key)
	}
	if len(raw) <= inlineWords*8 {
		var buf [inlineWords * 8]byte
		copy(buf[:], raw)
		for i := range (len(raw) + 7) / 8 {
			c.w[i].Store(leUint64(buf[i*8:]))
		}
		if c.big.Load() != nil {
			c.big.Store(nil)
		}
	} else {
		b := append([]byte(nil), raw...)
		c.big.Store(&b)
	}
	if n := int32(len(raw)); c.n.Load() != n {
		c.n.Store(n)
	}
	c.seq.Store(s + 2)
}

// clear removes the value (the peer deleted it).
func (c *cell) clear() {
	s := c.seq.Load()
	c.seq.Store(s + 1)
	c.n.Store(-1)
	c.big.Store(nil)
	c.seq.Store(s + 2)
}

// copyFrom copies o's value (growing the cells; writers are excluded).
func (c *cell) copyFrom(o *cell) {
	c.seq.Store(o.seq.Load())
	c.gen.Store(o.gen.Load())
	c.at.Store(o.at.Load())
	c.n.Store(o.n.Load())
	for i := range inlineWords {
		c.w[i].Store(o.w[i].Load())
	}
	c.big.Store(o.big.Load())
	c.key.Store(o.key.Load())
	c.dec.Store(o.dec.Load())
}

// read returns the value if it belongs to generation gen, decoded as local, and
// when it arrived.
func (c *cell) read(gen uint64, local *wire.Codec) (any, int64, bool) {
	// The common case: decoded already, and not written since (a decoding is made
	// from a consistent read at its seq, and every write moves the seq).
	s0 := c.seq.Load()
	if d := c.dec.Load(); d != nil && d.seq == s0 && d.local == local {
		if d.gen != gen {
			return nil, 0, false
		}
		return d.v, d.at, d.err == nil
	}
	for spins := 0; ; spins++ {
		s1 := c.seq.Load()
		if s1&1 != 0 {
			if spins > 16 {
				runtime.Gosched()
			}
			continue
		}
		n := c.n.Load()
		if c.gen.Load() != gen || n < 0 {
			if c.seq.Load() == s1 {
				return nil, 0, false
			}
			continue
		}
		at := c.at.Load()
		key := c.key.Load()
		var raw []byte
		var buf [inlineWords * 8]byte
		if n <= inlineWords*8 {
			for i := range inlineWords {
				putLeUint64(buf[i*8:], c.w[i].Load())
			}
			raw = buf[:n]
		} else if b := c.big.Load(); b != nil {
			raw = *b
		}
		if c.seq.Load() != s1 || key == nil {
			continue
		}
		v, err := key.PlanFor(local).Decode(key, raw)
		c.dec.Store(&decodedValue{seq: s1, gen: gen, at: at, local: local, v: v, err: err})
		return v, at, err == nil
	}
}

// raw returns the value's bytes if it belongs to generation gen (for the document,
// where no local type decodes it).
func (c *cell) raw(gen uint64) ([]byte, int64, bool) {
	for {
		s1 := c.seq.Load()
		if s1&1 != 0 {
			runtime.Gosched()
			continue
		}
		n := c.n.Load()
		if c.gen.Load() != gen || n < 0 {
			if c.seq.Load() == s1 {
				return nil, 0, false
			}
			continue
		}
		at := c.at.Load()
		var out []byte
		if n <= inlineWords*8 {
			var buf [inlineWords * 8]byte
			for i := range inlineWords {
				putLeUint64(buf[i*8:], c.w[i].Load())
			}
			out = append(out, buf[:n]...)
		} else if b := c.big.Load(); b != nil {
			out = append(out, (*b)...)
		}
		if c.seq.Load() == s1 {
			return out, at, true
		}
	}
}

// holds reports whether the cell has a value of one of the generations.
func (c *cell) holds(valid map[uint64]bool) bool {
	return c.n.Load() >= 0 && valid[c.gen.Load()]
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func putLeUint64(b []byte, v uint64) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}
