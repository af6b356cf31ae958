package sharedprefix

// serverLRU is one server's blocks in the index, most recent first, within the
// server's capacity: the same recency and eviction as upstream's per-server LRU
// (hashicorp/golang-lru), in slots of 24 bytes instead of a list element and a map
// entry per block, and with what the index needs besides:
//   - each block's parent (the block before it in the prompt that placed it), so
//     that a peer's touch of a chain of blocks (its last block and its length)
//     makes the same blocks most recent here;
//   - insertion as the least recent (a snapshot's blocks never evict newer ones);
//   - a digest of the blocks held, whatever their order, kept as blocks come and go,
//     so that replicas can compare what they hold.
//
// It is not safe for concurrent use: the index's lock guards it.
type serverLRU struct {
	name     string
	capacity int
	ents     []lruEnt
	pos      map[blockHash]int32
	head     int32 // most recent; -1 when empty
	tail     int32 // least recent; -1 when empty
	free     int32 // a free slot (chained through next); -1 when none
	digest   uint64
}

type lruEnt struct {
	hash, parent blockHash
	prev, next   int32
}

const none = -1

func newServerLRU(name string, capacity int) *serverLRU {
	return &serverLRU{name: name, capacity: capacity, pos: map[blockHash]int32{}, head: none, tail: none, free: none}
}

func (l *serverLRU) len() int { return len(l.pos) }

// mix spreads a block hash over 64 bits for the digest (splitmix64's finalizer):
// the sum of mixed hashes changes with any block added or removed.
func mix(h blockHash) uint64 {
	x := uint64(h)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (l *serverLRU) unlink(i int32) {
	e := &l.ents[i]
	if e.prev != none {
		l.ents[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next != none {
		l.ents[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
}

func (l *serverLRU) linkFront(i int32) {
	e := &l.ents[i]
	e.prev, e.next = none, l.head
	if l.head != none {
		l.ents[l.head].prev = i
	}
	l.head = i
	if l.tail == none {
		l.tail = i
	}
}

func (l *serverLRU) linkBack(i int32) {
	e := &l.ents[i]
	e.prev, e.next = l.tail, none
	if l.tail != none {
		l.ents[l.tail].next = i
	}
	l.tail = i
	if l.head == none {
		l.head = i
	}
}

// slot returns a free slot for h.
func (l *serverLRU) slot(h, parent blockHash) int32 {
	var i int32
	if l.free != none {
		i = l.free
		l.free = l.ents[i].next
	} else {
		l.ents = append(l.ents, lruEnt{})
		i = int32(len(l.ents) - 1)
	}
	l.ents[i] = lruEnt{hash: h, parent: parent}
	l.pos[h] = i
	l.digest += mix(h)
	return i
}

// touch makes i the most recent.
func (l *serverLRU) touch(i int32) {
	if l.head == i {
		return
	}
	l.unlink(i)
	l.linkFront(i)
}

// evictOldest removes the least recent block and returns it.
func (l *serverLRU) evictOldest() blockHash {
	i := l.tail
	h := l.ents[i].hash
	l.unlink(i)
	delete(l.pos, h)
	l.digest -= mix(h)
	l.ents[i] = lruEnt{next: l.free}
	l.free = i
	return h
}

// pushFront adds h (not held) as the most recent, evicting the least recent block
// first when full (evicted is called with it).
func (l *serverLRU) pushFront(h, parent blockHash, evicted func(blockHash)) {
	for len(l.pos) >= l.capacity && l.tail != none {
		evicted(l.evictOldest())
	}
	l.linkFront(l.slot(h, parent))
}

// pushBack adds h (not held) as the least recent, unless full: it would be the
// first to go, before anything held now.
func (l *serverLRU) pushBack(h, parent blockHash) bool {
	if len(l.pos) >= l.capacity {
		return false
	}
	l.linkBack(l.slot(h, parent))
	return true
}

// resize sets the capacity, evicting the least recent blocks beyond it.
func (l *serverLRU) resize(capacity int, evicted func(blockHash)) {
	l.capacity = capacity
	for len(l.pos) > capacity && l.tail != none {
		evicted(l.evictOldest())
	}
}

// chain collects into the slots of up to n blocks that end at last, walking
// back through the parents while they are held: last first.
func (l *serverLRU) chain(last blockHash, n int, into []int32) []int32 {
	into = into[:0]
	h := last
	for len(into) < n {
		i, ok := l.pos[h]
		if !ok {
			break
		}
		into = append(into, i)
		h = l.ents[i].parent
	}
	return into
}

// newestFirst calls f with every block and its parent, the most recent first,
// until f returns false.
func (l *serverLRU) newestFirst(f func(h, parent blockHash) bool) {
	for i := l.head; i != none; i = l.ents[i].next {
		if !f(l.ents[i].hash, l.ents[i].parent) {
			return
		}
	}
}

// purge removes every block, calling evicted with each.
func (l *serverLRU) purge(evicted func(blockHash)) {
	for l.tail != none {
		evicted(l.evictOldest())
	}
}
