package modelsim

import (
	"container/list"
	"fmt"
)

// Cache is a server's prefix KV cache of Capacity blocks. A block is in one of three
// states: held by running requests (not evictable), cached and free (its hash is
// known, it stays until evicted: least recently freed first), or empty. Blocks a
// running request computes before they are hashed (its uncached prompt blocks until
// its prefill ends, its answer's blocks until it finishes, its partial tail) count
// as held and anonymous. Cache is not safe for concurrent use: its Server locks.
type Cache struct {
	capacity int
	blocks   map[uint64]*block
	free     *list.List // of *block with refs == 0, least recently freed first
	held     int        // hashed blocks with refs > 0
	anon     int        // anonymous blocks held by running requests
}

type block struct {
	hash uint64
	refs int
	elem *list.Element // in free, when refs == 0
}

// NewCache is an empty cache of capacity blocks.
func NewCache(capacity int) *Cache {
	return &Cache{capacity: capacity, blocks: map[uint64]*block{}, free: list.New()}
}

// Allocation is what one running request holds in a Cache.
type Allocation struct {
	hashed []uint64 // held hashed blocks, in sequence order
	anon   int
}

// Capacity is the cache's size in blocks.
func (c *Cache) Capacity() int { return c.capacity }

// Held is how many blocks running requests hold.
func (c *Cache) Held() int { return c.held + c.anon }

// Cached is how many blocks have a hash (held or free).
func (c *Cache) Cached() int { return len(c.blocks) }

// Usage is the share of the capacity running requests hold (vLLM's
// kv_cache_usage_perc, a fraction: cached blocks no request holds count as free).
func (c *Cache) Usage() float64 {
	if c.capacity == 0 {
		return 0
	}
	return float64(c.Held()) / float64(c.capacity)
}

// Contains reports whether the block of hash h is cached.
func (c *Cache) Contains(h uint64) bool { _, ok := c.blocks[h]; return ok }

// Match is the longest prefix of hashes that is cached, in blocks.
func (c *Cache) Match(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			break
		}
		n++
	}
	return n
}

// Allocate admits a request whose prompt's full blocks are prompt and which needs
// total blocks in all (prompt, answer and partial tail): it holds the longest
// cached prefix of prompt, up to maxHit blocks, and total minus that many new
// anonymous blocks, evicting free blocks least recently freed first. It returns
// the hit in blocks, or ok false (and changes nothing) when the cache cannot make
// room.
func (c *Cache) Allocate(prompt []uint64, maxHit, total int) (a *Allocation, hit int, ok bool) {
	hit = min(c.Match(prompt), maxHit)
	hitFree := 0
	for _, h := range prompt[:hit] {
		if c.blocks[h].refs == 0 {
			hitFree++
		}
	}
	need := total - hit
	// Room: empty blocks, plus free blocks other than the hit's (held from now on).
	room := c.capacity - len(c.blocks) - c.anon + c.free.Len() - hitFree
	if need > room {
		return nil, 0, false
	}
	a = &Allocation{hashed: make([]uint64, 0, total)}
	for _, h := range prompt[:hit] {
		c.hold(c.blocks[h])
		a.hashed = append(a.hashed, h)
	}
	a.anon = need
	c.anon += need
	c.evict()
	return a, hit, true
}

// Commit hashes blocks a request computed (its next full blocks, in sequence
// order): each takes one of its anonymous blocks, or, when another request cached
// the same block meanwhile, holds that one (and keeps its own copy anonymous, as a
// duplicate).
func (c *Cache) Commit(a *Allocation, hashes []uint64) {
	for _, h := range hashes {
		if b, ok := c.blocks[h]; ok {
			c.hold(b)
		} else {
			if a.anon == 0 {
				panic(fmt.Sprintf("modelsim: commit of block %x with no anonymous block left", h))
			}
			a.anon--
			c.anon--
			c.blocks[h] = &block{hash: h, refs: 1}
			c.held++
		}
		a.hashed = append(a.hashed, h)
	}
}

// Free releases a finished (or aborted) request's blocks: anonymous ones become
// empty, hashed ones stay cached and, once no request holds them, join the free
// blocks, the request's last block first, so that a sequence is evicted from its
// tail.
func (c *Cache) Free(a *Allocation) {
	c.anon -= a.anon
	a.anon = 0
	for i := len(a.hashed) - 1; i >= 0; i-- {
		b := c.blocks[a.hashed[i]]
		b.refs--
		if b.refs == 0 {
			c.held--
			b.elem = c.free.PushBack(b)
		}
	}
	a.hashed = nil
}

// hold takes a reference on b.
func (c *Cache) hold(b *block) {
	if b.refs == 0 {
		c.free.Remove(b.elem)
		b.elem = nil
		c.held++
	}
	b.refs++
}

// evict drops free blocks, least recently freed first, until what is cached and
// held fits the capacity.
func (c *Cache) evict() {
	for len(c.blocks)+c.anon > c.capacity {
		e := c.free.Front()
		if e == nil {
			panic("modelsim: cache over capacity with nothing free")
		}
		b := c.free.Remove(e).(*block)
		delete(c.blocks, b.hash)
	}
}

// Serve runs a whole request through the cache at once, as if it took no time:
// allocate, cache its prompt's blocks, then its answer's, and free them. It
// returns the hit in blocks, or ok false when the cache had no room.
func (c *Cache) Serve(t Tokens) (hit int, ok bool) {
	a, hit, ok := c.Allocate(t.PromptBlocks, t.MaxHit(), t.Blocks())
	if !ok {
		return 0, false
	}
	c.Commit(a, t.PromptBlocks[hit:])
	c.Commit(a, t.SequenceBlocks[len(t.PromptBlocks):])
	c.Free(a)
	return hit, true
}

// Reset empties the cache; no request may hold blocks.
func (c *Cache) Reset() {
	if c.Held() != 0 {
		panic("modelsim: reset of a cache with held blocks")
	}
	c.blocks = map[uint64]*block{}
	c.free.Init()
}
