package sharedprefix

import (
	"hash/fnv"
	"sync"

	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash"
)

// blockHash is upstream's block hash (prefixhash): the same chain over the same
// tokens, so a replica's index and its peers' agree.
type blockHash = prefixhash.BlockHash

// index is the approximate prefix-cache index of a fleet of model servers: per
// server, an LRU of the block hashes routed there (serverLRU), of the capacity in
// blocks this replica gives the server, and per hash the servers that hold it. It
// is safe for concurrent use: matches take a read lock, changes (this replica's
// placements, its peers', a snapshot) the write lock, for one message at most.
//
// What it holds is bounded by this replica alone: the servers are the pool's (the
// plugin holds a peer's placement for another server aside), and each one's
// capacity is this replica's, whatever a peer's placement says.
type index struct {
	mu      sync.RWMutex
	servers map[string]*serverLRU
	holders map[blockHash]holders
	size    int // entries in every server's LRU
	chain   []int32
}

// holders are the servers that hold a hash: most hashes are held by one.
type holders struct {
	one  *serverLRU
	more []*serverLRU
}

func newIndex() *index {
	return &index{servers: map[string]*serverLRU{}, holders: map[blockHash]holders{}}
}

func (x *index) hold(h blockHash, s *serverLRU) {
	x.size++
	hs, ok := x.holders[h]
	switch {
	case !ok:
		x.holders[h] = holders{one: s}
	default:
		hs.more = append(hs.more, s)
		x.holders[h] = hs
	}
}

// evicted drops h of s (x.mu held).
func (x *index) evicted(s *serverLRU) func(blockHash) {
	return func(h blockHash) {
		x.size--
		hs, ok := x.holders[h]
		if !ok {
			return
		}
		switch {
		case hs.one == s && len(hs.more) == 0:
			delete(x.holders, h)
			return
		case hs.one == s:
			hs.one = hs.more[len(hs.more)-1]
			hs.more = hs.more[:len(hs.more)-1]
		default:
			for i, o := range hs.more {
				if o == s {
					hs.more[i] = hs.more[len(hs.more)-1]
					hs.more = hs.more[:len(hs.more)-1]
					break
				}
			}
		}
		if len(hs.more) == 0 {
			hs.more = nil
		}
		x.holders[h] = hs
	}
}

// server returns the LRU of server (x.mu held), created with capacity, or resized
// to it: capacity is always this replica's.
func (x *index) server(name string, capacity int) *serverLRU {
	s := x.servers[name]
	if s == nil {
		s = newServerLRU(name, capacity)
		x.servers[name] = s
	} else if s.capacity != capacity {
		s.resize(capacity, x.evicted(s))
	}
	return s
}

// route records that a request with hashes went to server, as upstream's index
// does (every hash made the most recent, in order, new ones added), and returns
// what a peer needs to do the same: the runs of hashes held already (a
// touch of the chain: its last hash and its length) and of new ones (with the
// parent of the first).
func (x *index) route(server string, capacity int, hashes []blockHash) []op {
	if len(hashes) == 0 || capacity <= 0 {
		return nil
	}
	var ops []op
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.server(server, capacity)
	ev := x.evicted(s)
	var parent blockHash
	for i, h := range hashes {
		if i > 0 {
			parent = hashes[i-1]
		}
		if at, ok := s.pos[h]; ok {
			s.touch(at)
			if n := len(ops); n > 0 && ops[n-1].kind == opTouch && ops[n-1].ref == parent {
				ops[n-1].ref, ops[n-1].n = h, ops[n-1].n+1
			} else {
				ops = append(ops, op{kind: opTouch, ref: h, n: 1})
			}
			continue
		}
		s.pushFront(h, parent, ev)
		x.hold(h, s)
		if n := len(ops); n > 0 && ops[n-1].kind == opAdd && len(ops[n-1].hashes) > 0 && ops[n-1].hashes[len(ops[n-1].hashes)-1] == parent {
			ops[n-1].hashes = append(ops[n-1].hashes, h)
		} else {
			ops = append(ops, op{kind: opAdd, ref: parent, hashes: []blockHash{h}})
		}
	}
	return ops
}

// apply does a peer's ops on server's LRU (of this replica's capacity): adds and
// touches as the peer did them, a snapshot's blocks as the least recent (they never
// evict a newer block, and a block held is left where it is).
func (x *index) apply(server string, capacity int, ops []op) {
	if capacity <= 0 || len(ops) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.server(server, capacity)
	ev := x.evicted(s)
	for _, o := range ops {
		switch o.kind {
		case opAdd:
			parent := o.ref
			for _, h := range o.hashes {
				if at, ok := s.pos[h]; ok {
					s.touch(at)
				} else {
					s.pushFront(h, parent, ev)
					x.hold(h, s)
				}
				parent = h
			}
		case opTouch:
			x.chain = s.chain(o.ref, o.n, x.chain)
			for i := len(x.chain) - 1; i >= 0; i-- { // the chain's first block first
				s.touch(x.chain[i])
			}
		case opOlder:
			for i := 0; i+1 < len(o.hashes); i += 2 {
				h := o.hashes[i]
				if _, ok := s.pos[h]; ok {
					continue
				}
				if !s.pushBack(h, o.hashes[i+1]) {
					break // full: the rest is older still
				}
				x.hold(h, s)
			}
		}
	}
}

// match counts, per server, the request's leading blocks it holds, as llm-d-router's
// approximate index does: walking the hashes in order, every server holding a hash
// gets one, until a hash that no server holds.
func (x *index) match(hashes []blockHash, into map[string]int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, h := range hashes {
		hs, ok := x.holders[h]
		if !ok {
			return
		}
		into[hs.one.name]++
		for _, s := range hs.more {
			into[s.name]++
		}
	}
}

// removeServer drops a server and every hash it held.
func (x *index) removeServer(server string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.servers[server]
	if s == nil {
		return
	}
	s.purge(x.evicted(s))
	delete(x.servers, server)
}

// serverNames lists the servers the index holds.
func (x *index) serverNames() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.servers))
	for name := range x.servers {
		out = append(out, name)
	}
	return out
}

// serverState is one server as the index holds it.
type serverState struct {
	blocks, capacity int
	digest           uint64
}

// servers are the blocks, capacity and digest of every server.
func (x *index) serverStates() map[string]serverState {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[string]serverState, len(x.servers))
	for name, s := range x.servers {
		out[name] = serverState{blocks: s.len(), capacity: s.capacity, digest: s.digest}
	}
	return out
}

// digestOf combines the servers' digests: replicas whose indexes hold the same
// blocks for the same servers have the same one.
func digestOf(servers map[string]serverState) uint64 {
	var d uint64
	for name, s := range servers {
		if s.blocks == 0 {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		d += mix(blockHash(h.Sum64() ^ s.digest))
	}
	return d
}

// entries is the index's size: blocks held, every server together.
func (x *index) entries() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.size
}

// each calls f for every server with its capacity and its blocks, the most recent
// first, as hash and parent pairs (a copy taken under the lock; f runs without
// it), until f returns false.
func (x *index) each(f func(server string, capacity int, pairs []blockHash) bool) {
	for _, name := range x.serverNames() {
		x.mu.RLock()
		s := x.servers[name]
		var pairs []blockHash
		capacity := 0
		if s != nil {
			pairs = make([]blockHash, 0, 2*s.len())
			s.newestFirst(func(h, parent blockHash) bool {
				pairs = append(pairs, h, parent)
				return true
			})
			capacity = s.capacity
		}
		x.mu.RUnlock()
		if len(pairs) > 0 && !f(name, capacity, pairs) {
			return
		}
	}
}
