package sharedprefix

import (
	"math/bits"
	"time"
)

// What anti-entropy compares: per server, the digests of its 4,096 leaves (the
// blocks of a range of hashes, with their stamps), summed into 64 groups and a
// root. Leaves that changed in the last inFlight on either replica are left out of
// a comparison: a live placement may not have reached the other one yet, and what
// is on its way is no difference to repair (it is compared in a later exchange).

// leafSet is a set of a server's leaves.
type leafSet [leafCount / 64]uint64

func (s *leafSet) add(l int) { s[l>>6] |= 1 << (l & 63) }

// addGroup adds a group's 64 leaves: one word.
func (s *leafSet) addGroup(g int) { s[g] = ^uint64(0) }

func (s *leafSet) has(l int) bool { return s != nil && s[l>>6]&(1<<(l&63)) != 0 }
func (s *leafSet) union(o *leafSet) {
	for i := range s {
		s[i] |= o[i]
	}
}
func (s *leafSet) each(f func(l int)) {
	for i, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			f(i<<6 | b)
			w &= w - 1
		}
	}
}

// excluded is the leaves left out of a comparison, by server.
type excluded map[string]*leafSet

// union is e and o together (a new map; the sets of e are copied).
func (e excluded) union(o excluded) excluded {
	out := make(excluded, len(e)+len(o))
	for name, s := range e {
		c := *s
		out[name] = &c
	}
	for name, s := range o {
		if c := out[name]; c != nil {
			c.union(s)
		} else {
			c := *s
			out[name] = &c
		}
	}
	return out
}

// recentLeaves are the leaves of each server that changed at or after since (in
// index ticks) (x.mu held).
func (x *index) recentLeaves(since uint32, now uint32) excluded {
	out := excluded{}
	window := now - since
	for name, s := range x.servers {
		var set *leafSet
		for l, m := range s.modified {
			if m != 0 && now-m <= window {
				if set == nil {
					set = &leafSet{}
				}
				set.add(l)
			}
		}
		if set != nil {
			out[name] = set
		}
	}
	return out
}

// recentSince is the index tick inFlight before now (at least 1).
func (x *index) recentSince(now time.Time) uint32 {
	return max(x.tick(now), uint32(inFlight.Milliseconds())+1) - uint32(inFlight.Milliseconds())
}

// root is a server's digest without the leaves in skip, and its blocks (x.mu
// held).
func (x *index) root(name string, skip *leafSet) (digest uint64, blocks int) {
	s := x.servers[name]
	if s == nil {
		return 0, 0
	}
	for l := range leafCount {
		if !skip.has(l) {
			digest += s.leaves[l]
		}
	}
	return digest, s.len()
}

// groups are a server's 64 group digests without the leaves in skip (x.mu held).
func (x *index) groups(name string, skip *leafSet) (g [groupCount]uint64) {
	if s := x.servers[name]; s != nil {
		for l := range leafCount {
			if !skip.has(l) {
				g[l/groupSize] += s.leaves[l]
			}
		}
	}
	return g
}

// leavesOf are the 64 leaf digests of a server's group (x.mu held).
func (x *index) leavesOf(name string, group int) (out [groupSize]uint64) {
	if s := x.servers[name]; s != nil {
		copy(out[:], s.leaves[group*groupSize:])
	}
	return out
}

// entriesIn are a server's blocks in the leaves of set, by leaf (x.mu held).
func (x *index) entriesIn(name string, set *leafSet) map[int][]entry {
	out := map[int][]entry{}
	s := x.servers[name]
	if s == nil {
		return out
	}
	for _, i := range s.heap {
		e := s.slots[i]
		if l := leafOf(e.hash); set.has(l) {
			out[l] = append(out[l], entry{hash: e.hash, stamp: e.stamp})
		}
	}
	return out
}
