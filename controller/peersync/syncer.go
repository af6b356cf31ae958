package peersync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Defaults of Options.
const (
	DefaultInterval        = 200 * time.Millisecond // llm-d-router's default crossReplicaSyncInterval
	DefaultTTLIntervals    = 3
	DefaultMaxMessageBytes = 4 << 20
	DefaultMaxValueBytes   = 4 << 10
	DefaultMaxEntries      = 1 << 17
	// MinInterval is the shortest push interval accepted.
	MinInterval = 10 * time.Millisecond
)

// Options configure a Syncer.
type Options struct {
	// Self is this replica: its namespace and name identify it to its peers, which
	// accept it only as the peer their own discovery lists at the connection's
	// source address.
	Self peers.Self
	// Peers is the membership: the peer set of this replica's peer discovery. A peer
	// counts while it is in the set, and only its address may push as it.
	Peers peers.Reader
	// Listener receives the peers' pushes (the peer-sync port). Run closes it.
	Listener net.Listener
	// Interval is how often this replica pushes its values to every peer (one
	// message per peer; an empty one is the heartbeat). Default DefaultInterval.
	Interval time.Duration
	// TTL is how long a peer's values count without a message from it. Default
	// DefaultTTLIntervals × Interval.
	TTL time.Duration
	// MaxMessageBytes bounds one message, MaxValueBytes one encoded value, MaxEntries
	// the entries one peer may define. Defaults DefaultMaxMessageBytes,
	// DefaultMaxValueBytes, DefaultMaxEntries.
	MaxMessageBytes int
	MaxValueBytes   int
	MaxEntries      int
	// TLS, if set, is mutual TLS for both directions.
	TLS *TLSFiles
	// SourceAddress, if set, picks the local address of the connections to a peer
	// (nil: the system's choice). Peers check the source address against their own
	// peer set, so it must be the address discovery lists for this replica.
	SourceAddress func(peer peers.PeerMetadata) net.IP
	// Instance labels the metrics (the plugin's name), so that two syncers in one
	// process keep their own.
	Instance string
	// Log receives connection and membership events.
	Log logr.Logger

	now func() time.Time // tests
}

// Syncer shares per-endpoint values of state keys with the replica's peers: every
// Interval it pushes what changed to each peer over one TCP connection per peer,
// and Get folds this replica's value with each live peer's latest one.
//
// Get reads immutable snapshots and takes no lock: the key table, the membership and
// each value are swapped whole by atomic pointers. A peer's values count while the
// peer is in the peer set, its connection's latest full state is the generation in
// force, and a message arrived within the TTL; any of those ending makes all of
// that peer's values stop counting at once.
type Syncer struct {
	o        Options
	log      logr.Logger
	m        *instanceMetrics
	lim      wire.Limits
	hello    wire.Hello
	writeTTL time.Duration

	keys    atomic.Pointer[map[string]*keyState] // copy-on-write
	members atomic.Pointer[[]member]             // the live peers, for Get

	mu         sync.Mutex // structural changes: keys, peers, the pending lists
	peers      map[string]*peerRec
	byAddr     map[string][]*peerRec
	freeIdx    []int
	nextIdx    int
	pendingNew []*localEntry
	pendingDel []*localEntry

	// slotsMu: RLock to create slots or write peers' values, Lock to grow the
	// per-peer arrays of every slot or to sweep empty slots.
	slotsMu sync.RWMutex
	peerCap int           // guarded by slotsMu
	layout  atomic.Uint64 // moves (under slotsMu.Lock) when cells move or slots go: cached cell pointers are then stale

	gen   atomic.Uint64 // generations, unique across peers
	clock atomic.Int64  // unix ns, set by the push loop each interval: Set's time stamp without a clock read

	push pushState // the push loop's own state

	aggregates sync.Map // key -> func([]any) any, for the document
}

// keyState is one state key: the local type of its values, its slots by endpoint,
// and what the push loop knows of it.
type keyState struct {
	name  string
	codec atomic.Pointer[wire.Codec]
	slots sync.Map // endpoint -> *slot

	index   uint64 // for the wire (guarded by Syncer.mu until defined, then the push loop's)
	defined bool   // push loop
}

// slot holds one (key, endpoint): this replica's value and each peer's, by the
// peer's index.
type slot struct {
	key      *keyState
	endpoint string
	local    atomic.Value               // this replica's value (of one type per key)
	localVer atomic.Uint64              // how many times it was set (0: never)
	localAt  atomic.Int64               // when it was last set, unix ns (at the push loop's resolution)
	cells    atomic.Pointer[[]cell]     // by peer index
	entry    atomic.Pointer[localEntry] // set once this replica set a value
	removed  atomic.Bool                // swept or deleted: writers look the slot up again
}

// member is a peer whose values count, as Get sees it: its index and generation in
// force.
type member struct {
	idx int
	gen uint64
}

// New checks o and returns a Syncer; Run starts it.
func New(o Options) (*Syncer, error) {
	if o.Peers == nil {
		return nil, errors.New("peersync: Options.Peers is required (the peer set of this replica's discovery)")
	}
	if o.Listener == nil {
		return nil, errors.New("peersync: Options.Listener is required (the peer-sync port)")
	}
	if o.Self.Name == "" {
		return nil, errors.New("peersync: the replica needs a name (POD_NAME) to identify itself to its peers")
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Interval < MinInterval {
		return nil, fmt.Errorf("peersync: interval %v is below the minimum %v", o.Interval, MinInterval)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTLIntervals * o.Interval
	}
	if o.TTL < o.Interval {
		return nil, fmt.Errorf("peersync: ttl %v is shorter than the interval %v: every peer would expire between two messages", o.TTL, o.Interval)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxMessageBytes < 1024 || o.MaxValueBytes < 16 || o.MaxValueBytes > min(o.MaxMessageBytes, MaxValueBytesLimit) || o.MaxEntries < 1 {
		return nil, fmt.Errorf("peersync: limits out of range: maxMessageBytes %d (at least 1024), maxValueBytes %d (16 to maxMessageBytes, at most %d), maxEntries %d",
			o.MaxMessageBytes, o.MaxValueBytes, MaxValueBytesLimit, o.MaxEntries)
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	s := &Syncer{
		o:        o,
		log:      o.Log,
		m:        metricsFor(o.Instance),
		lim:      wire.Limits{MaxValueBytes: o.MaxValueBytes, MaxNameBytes: 4096},
		writeTTL: o.TTL,
		hello: wire.Hello{Version: wire.Version, Namespace: o.Self.Namespace, Name: o.Self.Name,
			Start: uint64(o.now().UnixNano()), Nonce: binary.LittleEndian.Uint64(nonce[:])},
		peers:   map[string]*peerRec{},
		byAddr:  map[string][]*peerRec{},
		peerCap: 8,
	}
	s.clock.Store(o.now().UnixNano())
	keys := map[string]*keyState{}
	s.keys.Store(&keys)
	s.members.Store(&[]member{})
	return s, nil
}

// Interval is the push interval in force.
func (s *Syncer) Interval() time.Duration { return s.o.Interval }

// TTL is the time a peer's values count without a message from it.
func (s *Syncer) TTL() time.Duration { return s.o.TTL }

// Run follows the membership, serves the peers' pushes and pushes this replica's
// values until ctx ends (nil) or the listener fails.
func (s *Syncer) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { s.followMembers(ctx); return nil })
	g.Go(func() error { return s.serve(ctx) })
	g.Go(func() error { s.pushLoop(ctx); return nil })
	err := g.Wait()
	s.stopAll()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// keyFor returns the state of key, created if create.
func (s *Syncer) keyFor(key string, create bool) *keyState {
	if k := (*s.keys.Load())[key]; k != nil || !create {
		return k
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.keys.Load()
	if k := cur[key]; k != nil {
		return k
	}
	next := make(map[string]*keyState, len(cur)+1)
	for n, k := range cur {
		next[n] = k
	}
	k := &keyState{name: key}
	next[key] = k
	s.keys.Store(&next)
	return k
}

// slotFor returns the slot of (k, endpoint), created if create.
func (s *Syncer) slotFor(k *keyState, endpoint string, create bool) *slot {
	if v, ok := k.slots.Load(endpoint); ok {
		return v.(*slot)
	}
	if !create {
		return nil
	}
	s.slotsMu.RLock()
	defer s.slotsMu.RUnlock()
	sl := &slot{key: k, endpoint: endpoint}
	cells := newCells(s.peerCap)
	sl.cells.Store(&cells)
	actual, _ := k.slots.LoadOrStore(endpoint, sl)
	return actual.(*slot)
}

// Set records this replica's value for (key, endpoint); the next push sends it to
// every peer if it differs from the last one sent. Every value of a key must have
// the same Go type, and it is not modified afterwards (the runtime sets a fresh
// snapshot each time).
func (s *Syncer) Set(key, endpoint string, value any) error {
	if value == nil {
		return fmt.Errorf("peersync: Set(%q, %q): nil value", key, endpoint)
	}
	if rv := reflect.ValueOf(value); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return fmt.Errorf("peersync: Set(%q, %q): nil %T", key, endpoint, value)
	}
	c := wire.CodecFor(reflect.TypeOf(value))
	k := s.keyFor(key, true)
	kc := k.codec.Load()
	if kc == nil {
		k.codec.CompareAndSwap(nil, c)
		kc = k.codec.Load()
	}
	if kc != c {
		return fmt.Errorf("peersync: Set(%q, %q): a value of type %v, where the key's values are %v", key, endpoint, c.Type(), kc.Type())
	}
	for {
		sl := s.slotFor(k, endpoint, true)
		sl.local.Store(value)
		sl.localAt.Store(s.clock.Load())
		sl.localVer.Add(1)
		if sl.entry.Load() == nil {
			s.mu.Lock()
			if sl.entry.Load() == nil && !sl.removed.Load() {
				e := &localEntry{key: k, endpoint: endpoint, slot: sl}
				sl.entry.Store(e)
				s.pendingNew = append(s.pendingNew, e)
			}
			s.mu.Unlock()
		}
		if !sl.removed.Load() {
			return nil
		}
		// Deleted or swept meanwhile: set it on the slot that replaced it.
	}
}

// Delete removes (key, endpoint) here, this replica's value from every peer (in the
// next push), and the peers' values of it here (they come back if a peer sets it
// again).
func (s *Syncer) Delete(key, endpoint string) {
	k := s.keyFor(key, false)
	if k == nil {
		return
	}
	s.slotsMu.Lock()
	v, ok := k.slots.LoadAndDelete(endpoint)
	if ok {
		v.(*slot).removed.Store(true)
		s.layout.Add(1)
	}
	s.slotsMu.Unlock()
	if !ok {
		return
	}
	sl := v.(*slot)
	s.mu.Lock()
	if e := sl.entry.Load(); e != nil {
		e.deleted.Store(true)
		s.pendingDel = append(s.pendingDel, e)
	}
	s.mu.Unlock()
}

// Get folds this replica's value of (key, endpoint) and each live peer's with
// aggregate, which must not keep or modify the slice (it is reused) or its values. It reports
// false when no replica has a value. Peers' values are decoded as the type of this
// replica's values of the key: until this replica has set one, only its own count.
// A nil aggregate returns this replica's value.
func (s *Syncer) Get(key, endpoint string, aggregate func([]any) any) (any, bool) {
	k := (*s.keys.Load())[key]
	if k == nil {
		return nil, false
	}
	v, ok := k.slots.Load(endpoint)
	if !ok {
		return nil, false
	}
	sl := v.(*slot)
	local := sl.local.Load()
	if aggregate == nil {
		return local, local != nil
	}
	ms := *s.members.Load()
	buf := valsPool.Get().(*[]any)
	vals := (*buf)[:0]
	if local != nil {
		vals = append(vals, local)
	}
	if lc := k.codec.Load(); lc != nil {
		cells := *sl.cells.Load()
		for _, m := range ms {
			if m.idx >= len(cells) {
				continue
			}
			c := &cells[m.idx]
			// cell.read's common case, by hand (it is too large to be inlined).
			if d := c.dec.Load(); d != nil && d.seq == c.seq.Load() && d.local == lc {
				if d.gen == m.gen && d.err == nil {
					vals = append(vals, d.v)
				}
				continue
			}
			if v, _, ok := c.readSlow(m.gen, lc); ok {
				vals = append(vals, v)
			}
		}
	}
	var out any
	if len(vals) > 0 {
		out = aggregate(vals)
	}
	clear(vals) // the values are not kept alive by the pool
	*buf = vals[:0]
	valsPool.Put(buf)
	return out, out != nil || len(vals) > 0
}

// valsPool holds the slices Get hands the aggregates: an aggregate must not keep
// the slice it is given (llm-d-router's fold it into a new value).
var valsPool = sync.Pool{New: func() any { b := make([]any, 0, 32); return &b }}

// cell is peer idx's cell of sl. The caller holds slotsMu.RLock, and idx < peerCap.
func (sl *slot) cell(idx int) *cell {
	return &(*sl.cells.Load())[idx]
}

// growSlots makes every slot hold at least n peers' values.
func (s *Syncer) growSlots(n int) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	if n <= s.peerCap {
		return
	}
	newCap := s.peerCap
	for newCap < n {
		newCap *= 2
	}
	for _, k := range *s.keys.Load() {
		k.slots.Range(func(_, v any) bool {
			sl := v.(*slot)
			old := *sl.cells.Load()
			next := newCells(newCap)
			for i := range old {
				next[i].copyFrom(&old[i])
			}
			sl.cells.Store(&next)
			return true
		})
	}
	s.peerCap = newCap
	s.layout.Add(1)
}

// sweep removes the slots that hold nothing that counts: no value of this replica
// and no peer value of a generation in force.
func (s *Syncer) sweep() int {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	valid := map[uint64]bool{}
	for _, m := range *s.members.Load() {
		valid[m.gen] = true
	}
	swept := 0
	for _, k := range *s.keys.Load() {
		k.slots.Range(func(ep, v any) bool {
			sl := v.(*slot)
			if sl.localVer.Load() != 0 {
				return true
			}
			cells := *sl.cells.Load()
			for i := range cells {
				if cells[i].holds(valid) {
					return true
				}
			}
			if sl.entry.Load() != nil {
				return true // the push loop still lists it
			}
			k.slots.Delete(ep)
			sl.removed.Store(true)
			s.layout.Add(1)
			swept++
			return true
		})
	}
	return swept
}
