package sharedprefix

import (
	"hash/fnv"
	"sync"
	"time"

	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash"
)

// blockHash is upstream's block hash (prefixhash): the same chain over the same
// tokens, so a replica's index and its peers' agree.
type blockHash = prefixhash.BlockHash

// A stamp orders a server's blocks: the newest decision that routed the block
// there, in microseconds since the Unix epoch, times 4096, plus the block's
// position in the request's prompt (at most 4095): a request's later blocks are
// more recent than its earlier ones, as in upstream's LRU, which adds them in
// order. Stamps are made by the replica that decided, with its clock; every replica
// orders the same stamps the same way.
type stamp = uint64

// stampOf is the stamp of the block at position pos of a request decided at at
// (unix microseconds).
func stampOf(at int64, pos int) stamp {
	return stamp(max(at, 0))<<12 | stamp(min(max(pos, 0), maxPosition))
}

// maxPosition is the last position a stamp tells apart.
const maxPosition = 1<<12 - 1

// The leaves of a server's digest tree: 4,096, by the top 12 bits of a block's
// mixed hash, in 64 groups of 64. Every replica puts a block in the same leaf.
const (
	leafBits   = 12
	leafCount  = 1 << leafBits
	groupCount = 64
	groupSize  = leafCount / groupCount
)

// leafOf is the leaf of a block's hash.
func leafOf(h blockHash) int { return int(mix(uint64(h)) >> (64 - leafBits)) }

// contribution is what a block with its stamp adds to its leaf's digest: leaves
// (and servers) whose blocks and stamps are the same have the same sums, in any
// order the blocks came in.
func contribution(h blockHash, s stamp) uint64 {
	return mix(uint64(h)*0x9e3779b97f4a7c15 ^ s)
}

// mix spreads 64 bits over 64 bits (splitmix64's finalizer, a bijection).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// index is the approximate prefix-cache index of a fleet of model servers: per
// server, its C newest blocks (serverIndex), C the capacity in blocks this replica
// gives the server, and per block the servers that hold it.
//
// What a server holds is a function of the placements merged, whatever their
// order: each block keeps the newest stamp seen for it, and a server keeps the C
// blocks with the newest stamps (ties to the larger hash). Merging placements (a
// replica's own, a peer's, a repair's entries) is commutative, associative and
// idempotent, full servers included: replicas that merged the same placements, in
// any order and any number of times, hold the same blocks with the same stamps, and
// the same digests.
//
// It is safe for concurrent use: matches take a read lock, changes the write lock,
// for one message at most.
type index struct {
	mu      sync.RWMutex
	servers map[string]*serverIndex
	holders map[blockHash]holders
	size    int // blocks, every server together
	// epoch is when the index was made: leaves' modification times are
	// milliseconds since it.
	epoch  time.Time
	nextID uint32
}

// holders are the servers that hold a block, with its slot in each: most blocks
// are held by one.
type holders struct {
	one  holderRef
	more *[]holderRef
}

type holderRef struct {
	s    *serverIndex
	slot int32
}

func newIndex() *index {
	return &index{servers: map[string]*serverIndex{}, holders: map[blockHash]holders{}, epoch: time.Now()}
}

// tick is now in the index's milliseconds (leaves' modification times).
func (x *index) tick(now time.Time) uint32 { return uint32(now.Sub(x.epoch).Milliseconds()) }

// serverIndex is one server's blocks: at most capacity, the newest by stamp, in a
// heap whose root is the oldest (the next to go), with the digest of each leaf and
// when each leaf last changed. Not safe for concurrent use: the index's lock
// guards it.
type serverIndex struct {
	name     string
	id       uint32 // the index's number for it
	capacity int
	slots    []slotEnt
	free     []int32
	heap     []int32 // slots, a min-heap by (stamp, hash)
	digest   uint64  // the sum of the leaves'
	leaves   [leafCount]uint64
	modified [leafCount]uint32 // index ticks
}

type slotEnt struct {
	hash  blockHash
	stamp stamp
	heap  int32 // the slot's place in the heap
}

// older reports whether (sa, ha) goes before (sb, hb): it is evicted first.
func older(sa stamp, ha blockHash, sb stamp, hb blockHash) bool {
	return sa < sb || (sa == sb && ha < hb)
}

func (s *serverIndex) len() int { return len(s.heap) }

func (s *serverIndex) less(i, j int) bool {
	a, b := &s.slots[s.heap[i]], &s.slots[s.heap[j]]
	return older(a.stamp, a.hash, b.stamp, b.hash)
}

func (s *serverIndex) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.slots[s.heap[i]].heap = int32(i)
	s.slots[s.heap[j]].heap = int32(j)
}

func (s *serverIndex) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *serverIndex) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// server returns the index of server (x.mu held), created with capacity, or
// resized to it: capacity is always this replica's.
func (x *index) server(name string, capacity int) *serverIndex {
	s := x.servers[name]
	if s == nil {
		s = &serverIndex{name: name, id: x.nextID, capacity: capacity}
		x.nextID++
		x.servers[name] = s
		return s
	}
	if s.capacity != capacity {
		s.capacity = capacity
		now := x.tick(time.Now())
		for s.len() > capacity {
			x.evictOldest(s, now)
		}
	}
	return s
}

// resize sizes server to capacity, if the index holds it: its oldest blocks go
// when it holds more.
func (x *index) resize(server string, capacity int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.servers[server] != nil {
		x.server(server, capacity)
	}
}

// find is the slot of h in s, or -1.
func (x *index) find(s *serverIndex, h blockHash) int32 {
	hs, ok := x.holders[h]
	if !ok {
		return -1
	}
	if hs.one.s == s {
		return hs.one.slot
	}
	if hs.more != nil {
		for _, r := range *hs.more {
			if r.s == s {
				return r.slot
			}
		}
	}
	return -1
}

func (x *index) hold(h blockHash, s *serverIndex, slot int32) {
	x.size++
	hs, ok := x.holders[h]
	if !ok {
		x.holders[h] = holders{one: holderRef{s, slot}}
		return
	}
	if hs.more == nil {
		hs.more = &[]holderRef{}
	}
	*hs.more = append(*hs.more, holderRef{s, slot})
	x.holders[h] = hs
}

func (x *index) release(h blockHash, s *serverIndex) {
	x.size--
	hs, ok := x.holders[h]
	if !ok {
		return
	}
	more := []holderRef(nil)
	if hs.more != nil {
		more = *hs.more
	}
	switch {
	case hs.one.s == s && len(more) == 0:
		delete(x.holders, h)
		return
	case hs.one.s == s:
		hs.one = more[len(more)-1]
		more = more[:len(more)-1]
	default:
		for i, r := range more {
			if r.s == s {
				more[i] = more[len(more)-1]
				more = more[:len(more)-1]
				break
			}
		}
	}
	if len(more) == 0 {
		hs.more = nil
	} else {
		*hs.more = more
	}
	x.holders[h] = hs
}

// changeLeaf moves leaf l of s by remove then add (x.mu held), at now.
func (x *index) changeLeaf(s *serverIndex, l int, remove, add uint64, now uint32) {
	s.leaves[l] += add - remove
	s.digest += add - remove
	s.modified[l] = now
}

// upsert gives h the stamp st in s unless it holds a newer one (x.mu held): a new
// block goes in if it is among the newest capacity, evicting the oldest. It
// reports whether anything changed.
func (x *index) upsert(s *serverIndex, h blockHash, st stamp, now uint32) bool {
	if i := x.find(s, h); i >= 0 {
		e := &s.slots[i]
		if st <= e.stamp {
			return false
		}
		x.changeLeaf(s, leafOf(h), contribution(h, e.stamp), contribution(h, st), now)
		e.stamp = st
		s.down(int(e.heap))
		return true
	}
	if s.capacity <= 0 {
		return false
	}
	if s.len() >= s.capacity {
		root := &s.slots[s.heap[0]]
		if !older(root.stamp, root.hash, st, h) {
			return false // older than every block held: it would go first
		}
		x.evictOldest(s, now)
	}
	var i int32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		s.slots = append(s.slots, slotEnt{})
		i = int32(len(s.slots) - 1)
	}
	s.slots[i] = slotEnt{hash: h, stamp: st, heap: int32(len(s.heap))}
	s.heap = append(s.heap, i)
	s.up(len(s.heap) - 1)
	x.hold(h, s, i)
	x.changeLeaf(s, leafOf(h), 0, contribution(h, st), now)
	return true
}

// evictOldest removes s's oldest block (x.mu held).
func (x *index) evictOldest(s *serverIndex, now uint32) {
	i := s.heap[0]
	e := s.slots[i]
	last := len(s.heap) - 1
	s.swap(0, last)
	s.heap = s.heap[:last]
	if last > 0 {
		s.down(0)
	}
	x.release(e.hash, s)
	x.changeLeaf(s, leafOf(e.hash), contribution(e.hash, e.stamp), 0, now)
	s.slots[i] = slotEnt{}
	s.free = append(s.free, i)
}

// route records that a request with hashes, decided at at (unix µs), went to
// server, as upstream's index does (every block made the most recent, in order,
// new ones added).
func (x *index) route(server string, capacity int, hashes []blockHash, at int64) {
	x.apply(server, capacity, at, 0, hashes)
}

// apply merges a placement: hashes, the blocks at positions first, first+1, ... of
// a request decided at at, routed to server (of this replica's capacity).
func (x *index) apply(server string, capacity int, at int64, first int, hashes []blockHash) {
	if len(hashes) == 0 || capacity <= 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.server(server, capacity)
	now := x.tick(time.Now())
	for i, h := range hashes {
		x.upsert(s, h, stampOf(at, first+i), now)
	}
}

// entry is a block with its stamp, as a repair carries it.
type entry struct {
	hash  blockHash
	stamp stamp
}

// merge merges entries into server (of this replica's capacity), reporting how
// many changed it.
func (x *index) merge(server string, capacity int, entries []entry) int {
	if len(entries) == 0 || capacity <= 0 {
		return 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.server(server, capacity)
	now := x.tick(time.Now())
	changed := 0
	for _, e := range entries {
		if x.upsert(s, e.hash, e.stamp, now) {
			changed++
		}
	}
	return changed
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
		into[hs.one.s.name]++
		if hs.more != nil {
			for _, r := range *hs.more {
				into[r.s.name]++
			}
		}
	}
}

// removeServer drops a server and every block it held.
func (x *index) removeServer(server string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.servers[server]
	if s == nil {
		return
	}
	for _, i := range s.heap {
		x.release(s.slots[i].hash, s)
	}
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

// serverStates are the blocks, capacity and digest of every server.
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
// blocks with the same stamps for the same servers have the same one.
func digestOf(servers map[string]serverState) uint64 {
	var d uint64
	for name, s := range servers {
		if s.blocks == 0 {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		d += mix(h.Sum64() ^ s.digest)
	}
	return d
}

// entries is the index's size: blocks held, every server together.
func (x *index) entries() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.size
}

// bytesPerBlock is what a block held costs the index, measured
// (TestMemoryPerBlock): its slot, its place in the heap, its holders' entry.
const bytesPerBlock = 90

// bytesPerServer is what a server costs the index besides its blocks: its
// leaves' digests and modification times.
const bytesPerServer = leafCount * 12
