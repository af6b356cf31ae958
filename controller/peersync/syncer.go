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
	DefaultMaxKeys         = 64
	// DefaultMinEntryBound is the least a peer may define, whatever this replica
	// holds (see Options.MaxEntries).
	DefaultMinEntryBound = 4096
	// DefaultHandshakeTimeout bounds the time from a connection's accept to its
	// admission: its source listed by discovery, TLS, the preface and the hello.
	DefaultHandshakeTimeout    = 2 * time.Second
	DefaultMaxPending          = 64
	DefaultMaxPendingPerSource = 16
	DefaultMaxClockSkew        = time.Minute
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
	// MaxMessageBytes bounds one message, MaxValueBytes one encoded value. Defaults
	// DefaultMaxMessageBytes, DefaultMaxValueBytes.
	MaxMessageBytes int
	MaxValueBytes   int
	// MaxEntries is the most entries (key, endpoint) one peer may define, whatever
	// the pool. Within it, a peer may define what the pool can have: twice the
	// entries this replica sets itself, plus 256, and at least MinEntryBound
	// (defaults DefaultMaxEntries, DefaultMinEntryBound). A peer holds one value per
	// entry, so these bound what a peer can make this replica hold.
	MaxEntries    int
	MinEntryBound int
	// MaxKeys is the most state keys one peer may define (default DefaultMaxKeys);
	// keys that no replica of this one's sets are held up to 4 × MaxKeys in all, and
	// dropped once no peer defines them.
	MaxKeys int
	// HandshakeTimeout bounds a connection's admission (default
	// DefaultHandshakeTimeout): a connection from an address that discovery does not
	// list waits for it to be listed until then, and is refused as unknown-source
	// after it; a peer must send its hello within it.
	HandshakeTimeout time.Duration
	// MaxPending and MaxPendingPerSource bound the connections not yet admitted, in
	// all and from one address (defaults DefaultMaxPending,
	// DefaultMaxPendingPerSource); more are closed at once, as too-many-pending.
	MaxPending          int
	MaxPendingPerSource int
	// MaxClockSkew bounds how far in this replica's future a peer's start time may
	// be (default DefaultMaxClockSkew): a later start wins over an earlier one, so a
	// start time from the future is refused.
	MaxClockSkew time.Duration
	// PeersReady, if set, is closed once discovery has its first peer set: until
	// then, connections wait rather than be judged against an empty set.
	PeersReady <-chan struct{}
	// SelfListed, if set, reports whether this replica's own discovery lists it as
	// a member (by the rule its peers apply to it), and a channel closed when that
	// may have changed (discovery.PeerDiscovery.SelfListed). This replica dials its
	// peers only while it is listed: before (not ready yet, with membership ready)
	// and after (terminating) its peers would refuse it. Nil: always.
	SelfListed func() (bool, <-chan struct{})
	// PeerBudget bounds what one peer may cost this replica: every frame it sends,
	// and every message sent to it alone (defaults: DefaultPeerBudgetBytesPerSecond,
	// DefaultPeerBudgetBurstBytes).
	PeerBudget PeerBudget
	// TLS, if set, is mutual TLS for both directions.
	TLS *TLSFiles
	// SourceAddress, if set, picks the local address of the connections to a peer
	// (nil: the system's choice). Peers check the source address against their own
	// peer set, so it must be the address discovery lists for this replica.
	SourceAddress func(peer peers.PeerMetadata) net.IP
	// ReadTick, if set, reads the peers' frames at the ticks of a grid of this
	// period (the wall clock's, the same on every replica) rather than when each one
	// arrives, and flushes the broadcasts at those ticks too (when it is no longer
	// than their window): a replica then wakes once a tick for all its peers'
	// frames, not once for each, which is what a frame costs a mostly idle process
	// (docs/DECISIONS.md, "Capacity of active-active replicas"). It adds up to a
	// tick to every message's way. A replica that read nothing for 100ms reads the
	// next bytes when they come. 0 (the default) is off; else 1ms to 100ms. Unix only
	// (elsewhere it has no effect).
	ReadTick time.Duration
	// Instance labels the metrics (the plugin's name), so that two syncers in one
	// process keep their own.
	Instance string
	// Log receives connection and membership events.
	Log logr.Logger
	// ClockOffset is added to this machine's clock where the syncer's time of day
	// reaches its peers: its start time (in its handshake) and its broadcasts'
	// grid of windows. Deadlines, TTLs and budgets keep this machine's clock. A
	// syncer that stands in for a replica on another node, whose clock differs,
	// sets it (benchmarks and tests); 0 in production.
	ClockOffset time.Duration

	now func() time.Time // tests
}

// Syncer shares per-endpoint values of state keys with the replica's peers: every
// Interval it pushes what changed to each peer over one TCP connection per peer,
// and Get folds this replica's value with each live peer's latest one.
//
// Get reads immutable snapshots and takes no lock: the key table, the membership and
// each value are swapped whole by atomic pointers, and peers' values are decoded when
// they arrive. A peer's values count while the peer is in the peer set, its
// connection's latest full state is the generation in force, and a message arrived
// within the TTL; any of those ending makes all of that peer's values stop counting
// at once.
type Syncer struct {
	o     Options
	log   logr.Logger
	m     *instanceMetrics
	lim   wire.Limits
	hello wire.Hello

	keys    sync.Map                 // name -> *keyState
	members atomic.Pointer[[]member] // the live peers, for Get
	// lastRead: unix ns of the last bytes read on a paced connection (ReadTick).
	lastRead atomic.Int64

	mu         sync.Mutex // structural changes: keys, peers, the pending lists
	peers      map[string]*peerRec
	byAddr     map[string][]*peerRec
	freeIdx    []int
	nextIdx    int
	pendingNew []*localEntry
	pendingDel []*localEntry
	remoteKeys int           // keys no local Set made (bounded by 4 × MaxKeys)
	changed    chan struct{} // closed and replaced when the membership changes (admission waits on it)

	// slotsMu: RLock to create slots or write peers' values, Lock to grow the
	// per-peer arrays of every slot or to sweep empty slots.
	slotsMu sync.RWMutex
	peerCap int           // guarded by slotsMu
	layout  atomic.Uint64 // moves (under slotsMu.Lock) when cells move or slots go: cached cell pointers are then stale

	slotCount    atomic.Int64 // slots in all keys
	localEntries atomic.Int64 // (key, endpoint) this replica set and did not delete
	npeers       atomic.Int64 // peers in the membership
	sweeping     sync.Mutex   // one sweep at a time

	pending admission // connections not yet admitted

	gen   atomic.Uint64 // generations, unique across peers
	clock atomic.Int64  // unix ns, set by the push loop each interval: Set's time stamp without a clock read

	push pushState // the push loop's own state

	aggregates sync.Map // key -> func([]any) any, for the document
	broadcasts sync.Map // name -> *Broadcast
	reasons    sync.Map // rejection reasons counted here, for the document
}

// keyState is one state key: the local type of its values, its slots by endpoint,
// and what the push loop knows of it.
type keyState struct {
	name  string
	codec atomic.Pointer[wire.Codec]
	slots sync.Map    // endpoint -> *slot
	refs  int         // peers' connections that define it (Syncer.mu)
	local atomic.Bool // this replica set a value of it (written under Syncer.mu): kept for good

	index   uint64 // for the wire (guarded by Syncer.mu until defined, then the push loop's)
	defined bool   // push loop

	live atomic.Pointer[func(endpoint string) any] // this replica's value read at Get (SetLocalReader)
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

// CheckInterval is the one rule of a push interval (Options.Interval, and what a
// plugin takes for it): at least MinInterval. The error says what is wanted; the
// caller names the option, parameter or variable.
func CheckInterval(interval time.Duration) error {
	if interval < MinInterval {
		return fmt.Errorf("want at least %v", MinInterval)
	}
	return nil
}

// CheckTTL is the one rule of a TTL (Options.TTL): at least the interval, or every
// peer would expire between two of its messages.
func CheckTTL(ttl, interval time.Duration) error {
	if ttl < interval {
		return fmt.Errorf("want at least the interval (%v): every peer would expire between two of its messages", interval)
	}
	return nil
}

// CheckReadTick refuses a read tick (Options.ReadTick) out of its range: 0 (off),
// or 1ms to 100ms.
func CheckReadTick(tick time.Duration) error {
	if tick != 0 && (tick < time.Millisecond || tick > 100*time.Millisecond) {
		return errors.New("want 0 (off) or 1ms to 100ms")
	}
	return nil
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
	if err := CheckInterval(o.Interval); err != nil {
		return nil, fmt.Errorf("peersync: interval %v: %w", o.Interval, err)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTLIntervals * o.Interval
	}
	if err := CheckTTL(o.TTL, o.Interval); err != nil {
		return nil, fmt.Errorf("peersync: ttl %v: %w", o.TTL, err)
	}
	if err := CheckReadTick(o.ReadTick); err != nil {
		return nil, fmt.Errorf("peersync: read tick %v: %w", o.ReadTick, err)
	}
	setDefault(&o.MaxMessageBytes, DefaultMaxMessageBytes)
	setDefault(&o.MaxValueBytes, DefaultMaxValueBytes)
	setDefault(&o.MaxEntries, DefaultMaxEntries)
	setDefault(&o.MinEntryBound, DefaultMinEntryBound)
	setDefault(&o.MaxKeys, DefaultMaxKeys)
	setDefault(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	setDefault(&o.MaxPending, DefaultMaxPending)
	setDefault(&o.MaxPendingPerSource, DefaultMaxPendingPerSource)
	setDefault(&o.MaxClockSkew, DefaultMaxClockSkew)
	if o.MaxMessageBytes < 1024 || o.MaxValueBytes < 16 || o.MaxValueBytes > min(o.MaxMessageBytes, MaxValueBytesLimit) ||
		o.MaxEntries < 1 || o.MinEntryBound < 1 || o.MaxKeys < 1 || o.MaxPending < 1 || o.MaxPendingPerSource < 1 ||
		o.HandshakeTimeout < 0 || o.MaxClockSkew < 0 {
		return nil, fmt.Errorf("peersync: limits out of range: maxMessageBytes %d (at least 1024), maxValueBytes %d (16 to maxMessageBytes, at most %d), maxEntries %d, minEntryBound %d, maxKeys %d, maxPending %d, maxPendingPerSource %d (all at least 1), handshakeTimeout %v, maxClockSkew %v",
			o.MaxMessageBytes, o.MaxValueBytes, MaxValueBytesLimit, o.MaxEntries, o.MinEntryBound, o.MaxKeys, o.MaxPending, o.MaxPendingPerSource, o.HandshakeTimeout, o.MaxClockSkew)
	}
	o.PeerBudget.setDefaults()
	if err := o.PeerBudget.check(o.MaxMessageBytes); err != nil {
		return nil, fmt.Errorf("peersync: %w", err)
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
		o:   o,
		log: o.Log,
		m:   metricsFor(o.Instance),
		lim: wire.Limits{MaxValueBytes: o.MaxValueBytes, MaxNameBytes: 4096},
		hello: wire.Hello{Version: wire.Version, Namespace: o.Self.Namespace, Name: o.Self.Name,
			Start: uint64(o.now().Add(o.ClockOffset).UnixNano()), Nonce: binary.LittleEndian.Uint64(nonce[:])},
		peers:   map[string]*peerRec{},
		byAddr:  map[string][]*peerRec{},
		changed: make(chan struct{}),
		peerCap: 8,
	}
	s.pending.init(o.MaxPending, o.MaxPendingPerSource, s.m.pending)
	for _, r := range rejectReasons {
		s.reasons.Store(r, true)
	}
	s.clock.Store(o.now().UnixNano())
	s.members.Store(&[]member{})
	return s, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// ID is this replica's name as its peers know it ("namespace/name", as
// peers.PeerMetadata.ID gives theirs and Message.Peer names them).
func (s *Syncer) ID() string { return s.o.Self.Namespace + "/" + s.o.Self.Name }

// Interval is the push interval in force.
func (s *Syncer) Interval() time.Duration { return s.o.Interval }

// TTL is the time a peer's values count without a message from it.
func (s *Syncer) TTL() time.Duration { return s.o.TTL }

// ReadTick is the read tick in force (Options.ReadTick; 0: off).
func (s *Syncer) ReadTick() time.Duration { return s.o.ReadTick }

// Run follows the membership, serves the peers' pushes and pushes this replica's
// values until ctx ends. It returns nil then; it does not end before: an error of
// the listener is retried (see reachability.Accept).
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

// keyFor returns the state of key; create makes it this replica's key (Set): never
// bounded, never dropped.
func (s *Syncer) keyFor(key string, create bool) *keyState {
	v, ok := s.keys.Load(key)
	if ok && (!create || v.(*keyState).local.Load()) {
		return v.(*keyState)
	}
	if !create {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, created := s.keyLocked(key)
	if !created && !k.local.Load() {
		s.remoteKeys-- // a peer's key becomes this replica's too
	}
	k.local.Store(true)
	return k
}

// keyLocked returns the state of key, created if missing. Syncer.mu is held.
func (s *Syncer) keyLocked(key string) (*keyState, bool) {
	if k, ok := s.keys.Load(key); ok {
		return k.(*keyState), false
	}
	k := &keyState{name: key}
	s.keys.Store(key, k)
	return k, true
}

// peerKey returns the state of key for a peer's connection that defines it, and
// counts the reference; a key no replica of this one's sets is created only within
// 4 × MaxKeys such keys. releaseKeys drops the references.
func (s *Syncer) peerKey(key string) (*keyState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.keys.Load(key); ok {
		k := v.(*keyState)
		k.refs++
		return k, nil
	}
	if limit := 4 * s.o.MaxKeys; s.remoteKeys >= limit {
		return nil, fmt.Errorf("key %q: the peers define %d keys this replica does not set, the limit is %d (4 × maxKeys)", key, s.remoteKeys, limit)
	}
	k, _ := s.keyLocked(key)
	k.refs++
	s.remoteKeys++
	return k, nil
}

// releaseKeys drops the references of a connection's key definitions (a new full
// state, the connection's end): a peer's key that nothing references any more goes
// with the next sweep.
func (s *Syncer) releaseKeys(keys map[uint64]*inKey) {
	if len(keys) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		k.ks.refs--
	}
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
	actual, loaded := k.slots.LoadOrStore(endpoint, sl)
	if !loaded {
		s.slotCount.Add(1)
	}
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
		if k.codec.CompareAndSwap(nil, c) {
			// The peers' values that came before it are decoded now, off the request path.
			s.decodeKey(k, c)
		}
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
				s.localEntries.Add(1)
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
		s.slotCount.Add(-1)
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
		s.localEntries.Add(-1)
	}
	s.mu.Unlock()
}

// SetLocalReader makes Get take this replica's own value of key from read (called
// with the endpoint at each Get), in place of the value last Set: a replica sees its
// own latest decisions at once, as without a syncer, while its peers get the value
// once per interval. A nil from read falls back to the value last Set. Every value
// read must be of the type Set gives the key.
func (s *Syncer) SetLocalReader(key string, read func(endpoint string) any) {
	s.keyFor(key, true).live.Store(&read)
}

// Get folds this replica's value of (key, endpoint) and each live peer's with
// aggregate, which must not keep or modify the slice (it is reused) or its values.
// It reports false when no replica has a value. Peers' values are decoded as the
// type of this replica's values of the key when they arrive: until this replica has
// set one, only its own count. A nil aggregate returns this replica's value. This
// replica's value is the one last Set, or the one its SetLocalReader reads now.
//
// Get takes no lock and decodes nothing: it loads one pointer per peer.
func (s *Syncer) Get(key, endpoint string, aggregate func([]any) any) (any, bool) {
	kv, ok := s.keys.Load(key)
	if !ok {
		return nil, false
	}
	ks := kv.(*keyState)
	v, ok := ks.slots.Load(endpoint)
	if !ok {
		return nil, false
	}
	sl := v.(*slot)
	local := sl.local.Load()
	if read := ks.live.Load(); read != nil && local != nil {
		if v := (*read)(endpoint); v != nil {
			local = v
		}
	}
	if aggregate == nil {
		return local, local != nil
	}
	ms := *s.members.Load()
	buf := valsPool.Get().(*[]any)
	vals := (*buf)[:0]
	if local != nil {
		vals = append(vals, local)
	}
	cells := *sl.cells.Load()
	for _, m := range ms {
		if m.idx < len(cells) {
			if p := cells[m.idx].Load(); p.counts(m.gen) {
				vals = append(vals, p.v)
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
	s.keys.Range(func(_, kv any) bool {
		kv.(*keyState).slots.Range(func(_, v any) bool {
			sl := v.(*slot)
			old := *sl.cells.Load()
			next := newCells(newCap)
			for i := range old {
				next[i].Store(old[i].Load())
			}
			sl.cells.Store(&next)
			return true
		})
		return true
	})
	s.peerCap = newCap
	s.layout.Add(1)
}

// entryBound is the most entries one peer may define now: what the pool can have,
// judged by what this replica sets itself (see Options.MaxEntries).
func (s *Syncer) entryBound() int {
	return min(s.o.MaxEntries, max(s.o.MinEntryBound, 2*int(s.localEntries.Load())+256))
}

// slotBudget is the most slots every key may hold together before a sweep is due
// at once: this replica's entries, every peer's bound, and as much again for
// generations being replaced.
func (s *Syncer) slotBudget() int64 {
	return 2*(s.localEntries.Load()+s.npeers.Load()*int64(s.entryBound())) + 1024
}

// sweep removes what holds nothing that counts: peers' values of a generation no
// longer in force, slots with no value of this replica and none of a peer, and
// keys that no replica of this one's sets and no peer defines.
func (s *Syncer) sweep() int {
	s.sweeping.Lock()
	defer s.sweeping.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	valid := map[uint64]bool{}
	for _, m := range *s.members.Load() {
		valid[m.gen] = true
	}
	// Generations of connections still applying (their first full state may not be
	// in force yet) are kept too.
	for _, rec := range s.peers {
		if in := rec.current.Load(); in != nil {
			valid[in.gen.Load()] = true
		}
	}
	swept := 0
	s.keys.Range(func(name, kv any) bool {
		k := kv.(*keyState)
		k.slots.Range(func(ep, v any) bool {
			sl := v.(*slot)
			held := false
			cells := *sl.cells.Load()
			for i := range cells {
				if p := cells[i].Load(); p != nil {
					if valid[p.gen] {
						held = true
					} else {
						cells[i].CompareAndSwap(p, nil)
					}
				}
			}
			if held || sl.localVer.Load() != 0 || sl.entry.Load() != nil {
				return true // the push loop still lists it, or something counts
			}
			k.slots.Delete(ep)
			sl.removed.Store(true)
			s.slotCount.Add(-1)
			s.layout.Add(1)
			swept++
			return true
		})
		if !k.local.Load() && k.refs == 0 && isEmpty(&k.slots) {
			s.keys.Delete(name)
			s.remoteKeys--
		}
		return true
	})
	return swept
}

func isEmpty(m *sync.Map) bool {
	empty := true
	m.Range(func(_, _ any) bool { empty = false; return false })
	return empty
}
