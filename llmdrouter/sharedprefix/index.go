package sharedprefix

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash"
)

// blockHash is upstream's block hash (prefixhash): the same chain over the same
// tokens, so a replica's index and its peers' agree.
type blockHash = prefixhash.BlockHash

// index is the approximate prefix-cache index of a fleet of model servers: per
// server, an LRU of the block hashes routed there, of the server's capacity in
// blocks, and per hash the servers that hold it. It is safe for concurrent use:
// matches take a read lock, additions (this replica's placements, its peers', a
// snapshot) a write lock.
type index struct {
	mu      sync.RWMutex
	servers map[string]*serverLRU
	holders map[blockHash]map[string]struct{}
	size    int // entries in every server's LRU
}

type serverLRU struct {
	lru      *lru.Cache[blockHash, struct{}]
	capacity int
}

func newIndex() *index {
	return &index{servers: map[string]*serverLRU{}, holders: map[blockHash]map[string]struct{}{}}
}

// add records that server holds hashes, in that order (the last one is the most
// recent), in an LRU of capacity blocks (created at that size, resized when it
// changes), and returns those that were not in the server's LRU before (the
// caller's buffer fresh, reused).
func (x *index) add(server string, capacity int, hashes []blockHash, fresh []blockHash) []blockHash {
	fresh = fresh[:0]
	if len(hashes) == 0 || capacity <= 0 {
		return fresh
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.servers[server]
	if s == nil {
		// The eviction callback runs under x.mu (Add evicts), keeping holders and
		// size in step with the LRUs.
		c, _ := lru.NewWithEvict(capacity, func(h blockHash, _ struct{}) { x.evicted(server, h) })
		s = &serverLRU{lru: c, capacity: capacity}
		x.servers[server] = s
	} else if s.capacity != capacity {
		s.lru.Resize(capacity)
		s.capacity = capacity
	}
	for _, h := range hashes {
		if s.lru.Contains(h) {
			s.lru.Get(h) // most recent now
			continue
		}
		s.lru.Add(h, struct{}{})
		x.size++
		set := x.holders[h]
		if set == nil {
			set = make(map[string]struct{}, 1)
			x.holders[h] = set
		}
		set[server] = struct{}{}
		fresh = append(fresh, h)
	}
	return fresh
}

// evicted drops h of server (x.mu held).
func (x *index) evicted(server string, h blockHash) {
	x.size--
	if set, ok := x.holders[h]; ok {
		delete(set, server)
		if len(set) == 0 {
			delete(x.holders, h)
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
		set := x.holders[h]
		if len(set) == 0 {
			return
		}
		for s := range set {
			into[s]++
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
	s.lru.Purge() // the callback drops each hash
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

// counts are the blocks held per server.
func (x *index) counts() map[string]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[string]int, len(x.servers))
	for name, s := range x.servers {
		out[name] = s.lru.Len()
	}
	return out
}

// entries is the index's size: blocks held, every server together.
func (x *index) entries() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.size
}

// each calls f for every server with its capacity and its hashes, oldest first (so
// that adding them in order rebuilds the same recency), a copy taken under the
// lock; f runs without it.
func (x *index) each(f func(server string, capacity int, hashes []blockHash) bool) {
	for _, name := range x.serverNames() {
		x.mu.RLock()
		s := x.servers[name]
		var keys []blockHash
		capacity := 0
		if s != nil {
			keys = s.lru.Keys() // oldest to newest
			capacity = s.capacity
		}
		x.mu.RUnlock()
		if len(keys) > 0 && !f(name, capacity, keys) {
			return
		}
	}
}
