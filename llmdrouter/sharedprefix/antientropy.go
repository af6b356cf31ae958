package sharedprefix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
)

// Anti-entropy: every replica compares its index with each peer's about once an
// interval, and when a connection to a peer comes up both ways, and the two
// exchange the blocks of the leaves that differ. Bootstrap is the same exchange,
// from an empty index, with every peer. It needs neither the placements' sender
// nor a log: what a replica holds is the thing compared, and a merge gives the same
// index in any order (index), so what one replica missed (a connection gap, a
// backlog it could not take, a peer that left and came back, a publisher killed
// since) any peer that holds it repairs.
//
// One exchange, opened by one replica with one peer (the messages in exchange.go):
//
//  1. open: per server of the opener's pool, its root without its recent leaves;
//  2. groups: for the servers whose roots differ, the peer's 64 group digests
//     without either one's recent leaves;
//  3. leaves: the opener's leaf digests of the groups that differ (and its recent
//     leaves again: what changed since it opened);
//  4. entries: the peer's blocks of the leaves that differ and changed on neither
//     side lately;
//  5. entries back: the opener merges them, and sends its own blocks of those
//     leaves.
//
// Both then hold the newest C blocks of what the two held: the same. An exchange
// that finds nothing to repair is an agreement. A peer may open opensBurst
// exchanges at once and opensPerInterval an interval (past that it is cut off:
// exchange-rate), has one open at a time (a new open ends its earlier one), and asks
// each range once: what it can make this replica send is what differs, and all it
// sends and is sent is charged to its budget (peersync.PeerBudget).
const (
	// DefaultAntiEntropyInterval is how often a replica compares its index with
	// each peer's.
	DefaultAntiEntropyInterval = time.Second
	// inFlight is how long after a leaf changed it is left out of a comparison:
	// a live placement takes a window (10 ms) and a write to reach every peer, and
	// what is on its way is no difference to repair.
	inFlight = 100 * time.Millisecond
	// stepTimeout ends an exchange whose next step does not come for this long,
	// and maxExchange one that goes on longer in all (a peer that answers a part at
	// a time, slowly).
	stepTimeout = 3 * time.Second
	maxExchange = 20 * time.Second
	// maxOpening bounds the exchanges this replica opened that run at once: a peer
	// that answers slowly holds up one of them.
	maxOpening = 2
	// warmWait: a replica that has read its pool and has no peer for this long is
	// warm, empty (the first replica of a fleet).
	warmWait = 3 * time.Second
	// opensBurst and opensPerInterval bound the exchanges a peer opens.
	opensBurst       = 6
	opensPerInterval = 3
	// RejectExchangeRate is the reason (epp_peer_sync_rejections_total) of a peer
	// cut off for opening exchanges more often than opensPerInterval.
	RejectExchangeRate = "exchange-rate"
	// maxStampAhead bounds how far in this replica's future a peer's stamp may be
	// (peersync.DefaultMaxClockSkew, as a peer's start time): a block stamped
	// later would stay the newest for as long, and a placement or a repair that
	// carries one is refused.
	maxStampAhead = peersync.DefaultMaxClockSkew
)

// Outcomes of an exchange (epp_shared_prefix_exchanges_total).
const (
	outcomeAgreed   = "agreed"    // nothing to repair
	outcomeRepaired = "repaired"  // blocks went one way or both
	outcomeNotReady = "not-ready" // the peer has not read its pool yet, or runs without anti-entropy
	outcomeTimeout  = "timeout"   // a step did not come within stepTimeout
	outcomeFailed   = "failed"    // the connection broke, or the peer sent what it should not
)

var outcomes = []string{outcomeAgreed, outcomeRepaired, outcomeNotReady, outcomeTimeout, outcomeFailed}

// transport carries an exchange's messages: the broadcast (peersync.Broadcast).
type transport interface {
	// SendTo sends msg to peer alone, charged to its budget.
	SendTo(ctx context.Context, peer string, msg []byte) error
	// Peers are the peers connected both ways now.
	Peers() []string
}

type antiEntropy struct {
	p        *Plugin
	tr       transport
	interval time.Duration

	mu      sync.Mutex
	peers   map[string]*aePeer
	opening map[string]*side // the exchanges this replica opened, by peer

	wake      chan struct{}
	warm      chan struct{}
	warmOnce  sync.Once
	warmAfter atomic.Int64 // ns from the start
	warmEmpty atomic.Bool
	start     time.Time
}

// aePeer is what anti-entropy knows of one peer.
type aePeer struct {
	firstSeen, lastAgreed time.Time
	next                  time.Time // when this replica opens the next one
	due                   bool      // a new connection since the last open: open one at once
	lastOpen              time.Time // when this replica last opened one with it
	opens                 float64   // exchanges it may still open (a token bucket)
	opensAt               time.Time
	incoming              *side              // the exchange it opened, running
	parts                 map[byte]*assembly // its control messages being joined, by kind

	exchanges, repairs, blocksSent, blocksReceived uint64
	lastOutcome                                    string
}

// assembly is a control message being joined from its parts.
type assembly struct {
	round uint64
	body  []byte
}

// side is this replica's part in one exchange.
type side struct {
	peer  string
	round uint64
	ctl   chan []byte   // the next control message from the peer
	stop  chan struct{} // closed when it is over here (end)
	done  chan struct{} // closed at the peer's final part of blocks
	once  sync.Once

	mu       sync.Mutex
	allowed  map[string]*leafSet // the leaves whose blocks may come
	got      map[string]*leafSet // the leaves the peer sent blocks of
	perLeaf  map[leafKey]int
	received int
	progress time.Time
	final    bool
}

// leafKey names a leaf of a server.
type leafKey struct {
	server string
	leaf   int
}

// end ends the exchange here: the peer opened another, or the connection it ran
// on was replaced.
func (s *side) end() { s.once.Do(func() { close(s.stop) }) }

func newSide(peer string, round uint64) *side {
	return &side{peer: peer, round: round, ctl: make(chan []byte, 1), stop: make(chan struct{}), done: make(chan struct{}),
		got: map[string]*leafSet{}, perLeaf: map[leafKey]int{}, progress: time.Now()}
}

func newAntiEntropy(p *Plugin, interval time.Duration) *antiEntropy {
	return &antiEntropy{p: p, interval: interval, peers: map[string]*aePeer{}, opening: map[string]*side{},
		wake: make(chan struct{}, 1), warm: make(chan struct{}), start: time.Now()}
}

// peer returns what is known of id (a.mu held), created if new.
func (a *antiEntropy) peer(id string, now time.Time) *aePeer {
	ap := a.peers[id]
	if ap == nil {
		ap = &aePeer{firstSeen: now, due: true, opens: opensBurst, opensAt: now, parts: map[byte]*assembly{}}
		a.peers[id] = ap
	}
	return ap
}

// connected is the broadcast's Connected: this replica compares with peer at once
// (what the gap lost, or everything when it starts). An exchange it had opened
// with the peer ends: its messages went on the connections that broke.
func (a *antiEntropy) connected(peer string) {
	a.mu.Lock()
	a.peer(peer, time.Now()).due = true
	if s := a.opening[peer]; s != nil {
		s.end()
	}
	a.mu.Unlock()
	a.poke()
}

func (a *antiEntropy) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// markWarm makes the index warm: an exchange completed, or there was no peer.
func (a *antiEntropy) markWarm(empty bool) {
	a.warmOnce.Do(func() {
		a.warmAfter.Store(max(int64(time.Since(a.start)), 1))
		a.warmEmpty.Store(empty)
		a.p.m.warm.Set(1)
		close(a.warm)
	})
}

// run opens exchanges until ctx ends: with a peer connected anew at once, with
// every other one about once an interval, at most maxOpening at a time, the one
// due longest first.
func (a *antiEntropy) run(ctx context.Context) {
	tick := time.NewTicker(max(a.interval/4, 20*time.Millisecond))
	defer tick.Stop()
	var running sync.WaitGroup
	defer running.Wait()
	var poolAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.wake:
		}
		now := time.Now()
		if !a.p.poolKnown() {
			continue
		}
		if poolAt.IsZero() {
			poolAt = now
		}
		listed := a.tr.Peers()
		a.mu.Lock()
		var due []string
		for id, ap := range a.peers {
			if !slices.Contains(listed, id) {
				if ap.incoming == nil && a.opening[id] == nil {
					delete(a.peers, id)
				}
			} else if a.opening[id] == nil && (ap.due || !ap.next.After(now)) && now.Sub(ap.lastOpen) >= a.openGap() {
				due = append(due, id)
			}
		}
		for _, id := range listed {
			if a.peers[id] == nil {
				a.peer(id, now)
				due = append(due, id)
			}
		}
		slices.SortFunc(due, func(x, y string) int { return a.peers[x].next.Compare(a.peers[y].next) })
		due = due[:min(len(due), max(maxOpening-len(a.opening), 0))]
		for _, id := range due {
			a.opening[id] = newSide(id, rand.Uint64())
			a.peers[id].due, a.peers[id].lastOpen = false, now
		}
		a.mu.Unlock()
		a.p.m.disagreement.Set(a.disagreement(now).Seconds())
		if len(listed) == 0 && now.Sub(poolAt) >= warmWait {
			a.markWarm(true)
		}
		for _, id := range due {
			running.Go(func() {
				a.openWith(ctx, id)
				a.poke() // a slot is free
			})
		}
	}
}

// openGap is the least time between two exchanges this replica opens with one
// peer, however often its connections come up: within the opens a peer allows
// (opensPerInterval an interval), so that a flapping connection does not get this
// replica cut off for exchange-rate.
func (a *antiEntropy) openGap() time.Duration { return a.interval / opensPerInterval }

// disagreement is the longest any peer has gone without an agreement with this
// replica (since it was first seen, if never).
func (a *antiEntropy) disagreement(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var worst time.Duration
	for _, ap := range a.peers {
		since := ap.lastAgreed
		if since.IsZero() {
			since = ap.firstSeen
		}
		worst = max(worst, now.Sub(since))
	}
	return worst
}

// completed records an exchange with peer that ended with outcome, opened by this
// replica ("opened") or by the peer ("answered").
func (a *antiEntropy) completed(peer, role, outcome string, sent, received int) {
	now := time.Now()
	a.p.m.exchanges.WithLabelValues(role, outcome).Inc()
	a.p.m.repairBlocks.WithLabelValues("sent").Add(float64(sent))
	a.p.m.repairBlocks.WithLabelValues("received").Add(float64(received))
	ok := outcome == outcomeAgreed || outcome == outcomeRepaired
	a.mu.Lock()
	ap := a.peer(peer, now)
	ap.lastOutcome = outcome
	ap.blocksSent += uint64(sent)
	ap.blocksReceived += uint64(received)
	if ok {
		ap.exchanges++
		ap.lastAgreed = now
		if outcome == outcomeRepaired {
			ap.repairs++
		}
	}
	if role == "opened" || ok {
		wait := a.interval
		if !ok {
			wait = a.interval / 4 // not ready, or broken: again soon
		}
		// A connection that came up meanwhile left due set: compared at once.
		ap.next = now.Add(time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64())))
	}
	a.mu.Unlock()
	if ok {
		a.markWarm(false)
	}
	if outcome != outcomeAgreed {
		a.p.log.V(1).Info("anti-entropy exchange", "peer", peer, "role", role, "outcome", outcome, "blocksSent", sent, "blocksReceived", received)
	}
}

// send sends parts to peer alone, each within stepTimeout.
func (a *antiEntropy) send(ctx context.Context, peer string, parts ...[]byte) error {
	for _, part := range parts {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := a.tr.SendTo(sctx, peer, part)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// sendControl sends an open, groups or leaves body in parts.
func (a *antiEntropy) sendControl(ctx context.Context, peer string, kind byte, round uint64, body []byte) error {
	return a.send(ctx, peer, controlParts(kind, round, body, a.p.maxMessageBytes())...)
}

// receive takes a part of an exchange's message from peer (the broadcast's
// connection goroutine: it never waits for an exchange). An error cuts the peer
// off.
func (a *antiEntropy) receive(peer string, msg []byte) error {
	kind, round, flags, payload, err := parseHeader(msg)
	if err != nil {
		return err
	}
	final := flags&flagFinal != 0
	if kind == msgEntries || kind == msgEntriesBack {
		a.mu.Lock()
		var s *side
		if kind == msgEntries {
			s = a.opening[peer] // the peer's blocks, in this replica's exchange
		} else if ap := a.peers[peer]; ap != nil {
			s = ap.incoming // the opener's blocks, in its exchange
		}
		a.mu.Unlock()
		if s == nil || s.round != round {
			return nil // an exchange that is over
		}
		return a.take(s, final, payload)
	}
	if kind != msgOpen && kind != msgGroups && kind != msgLeaves {
		return fmt.Errorf("%w: an exchange's message of kind %#x", errMalformedPlacement, kind)
	}
	body, err := a.join(peer, kind, round, final, payload)
	if err != nil || body == nil {
		return err
	}
	if kind == msgOpen {
		return a.opened(peer, round, body)
	}
	a.mu.Lock()
	var s *side
	if kind == msgGroups {
		s = a.opening[peer]
	} else if ap := a.peers[peer]; ap != nil {
		s = ap.incoming
	}
	a.mu.Unlock()
	if s == nil || s.round != round {
		return nil
	}
	select {
	case s.ctl <- body:
		return nil
	default:
		return fmt.Errorf("%w: a step of an exchange sent twice", errMalformedPlacement)
	}
}

// join adds a part of a control message of peer's, and returns the message once
// its final part came (nil before). A part of another round starts it anew.
func (a *antiEntropy) join(peer string, kind byte, round uint64, final bool, payload []byte) ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ap := a.peer(peer, time.Now())
	as := ap.parts[kind]
	if as == nil || as.round != round {
		as = &assembly{round: round, body: []byte{}}
		ap.parts[kind] = as
	}
	if len(as.body)+len(payload) > maxControlBytes {
		delete(ap.parts, kind)
		return nil, fmt.Errorf("%w: an exchange's message over %d bytes", errMalformedPlacement, maxControlBytes)
	}
	as.body = append(as.body, payload...)
	if !final {
		return nil, nil
	}
	delete(ap.parts, kind)
	return as.body, nil
}

// take merges a part of the peer's blocks in exchange s: of the leaves s allows
// only, each block in its leaf, stamped no later than this replica's clock allows,
// at most a server's capacity a leaf.
func (a *antiEntropy) take(s *side, final bool, payload []byte) error {
	r := &reader{b: payload}
	recs := parseEntries(r)
	if err := r.err(); err != nil {
		return err
	}
	latest := stampOf(a.p.clock().Add(maxStampAhead).UnixMicro(), maxPosition)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.final || s.allowed == nil {
		return fmt.Errorf("%w: blocks before the leaves were compared, or after the last part", errMalformedPlacement)
	}
	for _, rec := range recs {
		k := leafKey{rec.server, rec.leaf}
		if s.perLeaf[k] += len(rec.entries); !s.allowed[rec.server].has(rec.leaf) || s.perLeaf[k] > maxCapacity {
			return fmt.Errorf("%w: blocks of a leaf not compared, or more than a server holds", errMalformedPlacement)
		}
		for _, e := range rec.entries {
			if leafOf(e.hash) != rec.leaf || e.stamp == 0 || e.stamp > latest {
				return fmt.Errorf("%w: a block of another leaf, or stamped more than %v ahead of this replica's clock", errMalformedPlacement, maxStampAhead)
			}
		}
		if s.got[rec.server] == nil {
			s.got[rec.server] = &leafSet{}
		}
		s.got[rec.server].add(rec.leaf)
		if a.p.inPool(rec.server) {
			s.received += a.p.idx.merge(rec.server, a.p.localCapacity(rec.server), rec.entries)
		}
	}
	s.progress = time.Now()
	if final {
		s.final = true
		close(s.done)
	}
	return nil
}

// await is the peer's next control message, or the outcome that ends the wait.
func (s *side) await(ctx context.Context) ([]byte, string) {
	select {
	case msg := <-s.ctl:
		return msg, ""
	case <-time.After(stepTimeout):
		return nil, outcomeTimeout
	case <-s.stop:
	case <-ctx.Done():
	}
	return nil, outcomeFailed
}

// awaitBlocks waits for the peer's last part of blocks ("") or the outcome that
// ends the wait: the peer sent nothing for stepTimeout.
func (s *side) awaitBlocks(ctx context.Context) string {
	for {
		select {
		case <-s.done:
			return ""
		case <-time.After(stepTimeout / 4):
			s.mu.Lock()
			stalled := time.Since(s.progress) > stepTimeout
			s.mu.Unlock()
			if stalled {
				return outcomeTimeout
			}
		case <-s.stop:
			return outcomeFailed
		case <-ctx.Done():
			return outcomeFailed
		}
	}
}

// blocksOf are this replica's blocks of the leaves of sets, as records.
func (a *antiEntropy) blocksOf(sets map[string]*leafSet) (recs []leafEntries, n int) {
	x := a.p.idx
	x.mu.RLock()
	defer x.mu.RUnlock()
	for server, set := range sets {
		byLeaf := x.entriesIn(server, set)
		set.each(func(l int) {
			recs = append(recs, leafEntries{server: server, leaf: l, entries: byLeaf[l]})
			n += len(byLeaf[l])
		})
	}
	sort.Slice(recs, func(i, j int) bool {
		return recs[i].server < recs[j].server || (recs[i].server == recs[j].server && recs[i].leaf < recs[j].leaf)
	})
	return recs, n
}

// recent are the leaves that changed since since (in index ticks; 0: within
// inFlight of now).
func (a *antiEntropy) recent(since uint32) excluded {
	x := a.p.idx
	x.mu.RLock()
	defer x.mu.RUnlock()
	now := time.Now()
	if since == 0 {
		since = x.recentSince(now)
	}
	return x.recentLeaves(since, x.tick(now))
}

// openWith runs one exchange with peer, opened by this replica (its side is in
// a.opening).
func (a *antiEntropy) openWith(ctx context.Context, peer string) {
	a.mu.Lock()
	s := a.opening[peer]
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, maxExchange)
	defer cancel()
	outcome, sent, received := a.exchange(ctx, s)
	a.mu.Lock()
	delete(a.opening, peer)
	a.mu.Unlock()
	a.completed(peer, "opened", outcome, sent, received)
}

// exchange runs s, this replica's side of an exchange it opened.
func (a *antiEntropy) exchange(ctx context.Context, s *side) (outcome string, sent, received int) {
	p, x := a.p, a.p.idx
	pool := p.poolNames()
	mine := a.recent(0)
	x.mu.RLock()
	open := control{Recent: recentOf(mine)}
	blocks := map[string]int{}
	for _, name := range pool {
		d, n := x.root(name, mine[name])
		ri := rootInfo{Server: name, Capacity: p.statedCapacity(name), Blocks: n, Digest: d}
		if ri.Capacity == 0 {
			ri.Configured = p.configuredCapacity()
		}
		open.Roots = append(open.Roots, ri)
		blocks[name] = n
	}
	x.mu.RUnlock()
	if a.sendControl(ctx, s.peer, msgOpen, s.round, controlBody(open)) != nil {
		return outcomeFailed, 0, 0
	}
	msg, outcome := s.await(ctx)
	if msg == nil {
		return outcome, 0, 0
	}
	groups, err := parseControl(msg)
	switch {
	case err != nil:
		return outcomeFailed, 0, 0
	case groups.NotReady:
		return outcomeNotReady, 0, 0
	}
	mine = a.recent(0) // what changed since it opened, too
	skip := mine.union(groups.recent())
	leaves := control{Recent: recentOf(mine)}
	allowed := map[string]*leafSet{}
	x.mu.RLock()
	for _, g := range groups.Groups {
		if _, asked := blocks[g.Server]; !asked {
			continue
		}
		ours, theirs := x.groups(g.Server, skipFor(skip, g.Server, blocks[g.Server], g.Blocks)), g.digests()
		for k := range groupCount {
			if ours[k] != theirs[k] {
				leaves.Leaves = append(leaves.Leaves, digestVector{Server: g.Server, Group: k, Digests: pack(x.leavesOf(g.Server, k))})
				if allowed[g.Server] == nil {
					allowed[g.Server] = &leafSet{}
				}
				allowed[g.Server].addGroup(k)
			}
		}
	}
	x.mu.RUnlock()
	ls := leaves.Leaves
	s.mu.Lock()
	s.allowed, s.progress = allowed, time.Now()
	s.mu.Unlock()
	if a.sendControl(ctx, s.peer, msgLeaves, s.round, controlBody(leaves)) != nil {
		return outcomeFailed, 0, 0
	}
	if len(ls) == 0 {
		return outcomeAgreed, 0, 0
	}
	// The peer's blocks come, and are merged, on its connection (take).
	if outcome := s.awaitBlocks(ctx); outcome != "" {
		return outcome, 0, s.received
	}
	s.mu.Lock()
	got, received := s.got, s.received
	s.mu.Unlock()
	recs, sent := a.blocksOf(got)
	if a.send(ctx, s.peer, entryParts(msgEntriesBack, s.round, p.maxMessageBytes(), recs)...) != nil {
		return outcomeFailed, sent, received
	}
	if len(got) == 0 {
		return outcomeAgreed, 0, 0
	}
	return outcomeRepaired, sent, received
}

// skipFor is the leaves of server left out of its comparison: none when either
// replica holds none of its blocks (one that starts, or that had it removed: every
// leaf differs, and what is in flight is no reason to wait), else skip's.
func skipFor(skip excluded, server string, mine, theirs int) *leafSet {
	if mine == 0 || theirs == 0 {
		return nil
	}
	return skip[server]
}

// opened takes a peer's open: it refuses a peer that opens too often, and
// otherwise answers (in a goroutine of the exchange's own), ending the peer's
// earlier one if it still ran. An exchange this replica opened with the same peer
// goes on beside it (both opened at once when their connection came up): their
// merges give the same either way.
func (a *antiEntropy) opened(peer string, round uint64, body []byte) error {
	open, err := parseControl(body)
	if err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	ap := a.peer(peer, now)
	if a.interval > 0 {
		ap.opens = min(opensBurst, ap.opens+now.Sub(ap.opensAt).Seconds()/a.interval.Seconds()*opensPerInterval)
	}
	ap.opensAt = now
	if ap.opens < 1 {
		a.mu.Unlock()
		return &peersync.RejectError{Reason: RejectExchangeRate, Err: fmt.Errorf("more than %d exchanges opened an interval (%v)", opensPerInterval, a.interval)}
	}
	if a.interval > 0 {
		ap.opens--
	}
	if old := ap.incoming; old != nil {
		old.end()
	}
	s := newSide(peer, round)
	ap.incoming = s
	a.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(a.p.ctx, maxExchange)
		defer cancel()
		outcome, sent, received := a.answer(ctx, s, open)
		a.mu.Lock()
		if ap := a.peers[peer]; ap != nil && ap.incoming == s {
			ap.incoming = nil
		}
		a.mu.Unlock()
		if outcome != outcomeNotReady {
			a.completed(peer, "answered", outcome, sent, received)
		}
	}()
	return nil
}

// answer runs s, this replica's side of an exchange the peer opened.
func (a *antiEntropy) answer(ctx context.Context, s *side, open *control) (outcome string, sent, received int) {
	p, x := a.p, a.p.idx
	if !p.poolKnown() || a.interval == 0 {
		// Its pool not read yet, or anti-entropy off here: it compares nothing.
		_ = a.sendControl(ctx, s.peer, msgGroups, s.round, controlBody(control{NotReady: true}))
		return outcomeNotReady, 0, 0
	}
	theirs := open.recent()
	x.mu.RLock()
	since := x.recentSince(time.Now())
	x.mu.RUnlock()
	mine := a.recent(since)
	skip := theirs.union(mine)
	groups := control{Recent: recentOf(mine)}
	whole := map[string]bool{} // servers that either one holds none of: compared whole
	x.mu.RLock()
	for _, ri := range open.Roots {
		if !p.inPool(ri.Server) {
			continue
		}
		if p.sizesOtherwise(ri) {
			p.conflicts.Add(1)
			p.m.conflicts.Inc()
			continue // replicas that size a server differently never agree on it
		}
		d, n := x.root(ri.Server, theirs[ri.Server])
		if (ri.Blocks == 0 || n == 0) && ri.Blocks == n || ri.Blocks != 0 && n != 0 && d == ri.Digest {
			continue
		}
		groups.Groups = append(groups.Groups, digestVector{Server: ri.Server, Blocks: n, Digests: pack(x.groups(ri.Server, skipFor(skip, ri.Server, ri.Blocks, n)))})
		whole[ri.Server] = ri.Blocks == 0 || n == 0
	}
	x.mu.RUnlock()
	if a.sendControl(ctx, s.peer, msgGroups, s.round, controlBody(groups)) != nil {
		return outcomeFailed, 0, 0
	}
	if len(groups.Groups) == 0 {
		return outcomeAgreed, 0, 0
	}
	msg, outcome := s.await(ctx)
	if msg == nil {
		return outcome, 0, 0
	}
	leaves, err := parseControl(msg)
	if err != nil {
		return outcomeFailed, 0, 0
	}
	ls := leaves.Leaves
	if len(ls) == 0 {
		return outcomeAgreed, 0, 0 // the groups agreed after all
	}
	// Leaves that changed on either side since the groups were compared, or
	// within inFlight before, are left out.
	skip = leaves.recent().union(a.recent(since))
	differ := map[string]*leafSet{}
	seen := map[leafKey]bool{}
	x.mu.RLock()
	for _, li := range ls {
		k := leafKey{li.Server, li.Group}
		if _, compared := whole[li.Server]; !compared || seen[k] {
			x.mu.RUnlock()
			return outcomeFailed, 0, 0 // asked about a group twice, or one it was not sent
		}
		seen[k] = true
		ours, theirs := x.leavesOf(li.Server, li.Group), li.digests()
		for i := range groupSize {
			l := li.Group*groupSize + i
			if ours[i] != theirs[i] && (whole[li.Server] || !skip[li.Server].has(l)) {
				if differ[li.Server] == nil {
					differ[li.Server] = &leafSet{}
				}
				differ[li.Server].add(l)
			}
		}
	}
	x.mu.RUnlock()
	s.mu.Lock()
	s.allowed, s.progress = differ, time.Now()
	s.mu.Unlock()
	recs, sent := a.blocksOf(differ)
	if a.send(ctx, s.peer, entryParts(msgEntries, s.round, p.maxMessageBytes(), recs)...) != nil {
		return outcomeFailed, sent, 0
	}
	if outcome := s.awaitBlocks(ctx); outcome != "" {
		return outcome, sent, s.received
	}
	if len(differ) == 0 {
		return outcomeAgreed, 0, 0
	}
	return outcomeRepaired, sent, s.received
}

// PeerAgreement is anti-entropy's view of one peer, as the document shows it.
type PeerAgreement struct {
	Peer string `json:"peer"`
	// AgreedSecondsAgo is the time since an exchange with the peer last ended
	// with both holding the same (nil: never).
	AgreedSecondsAgo *float64 `json:"agreedSecondsAgo"`
	// Exchanges completed with it (opened by either), and those that repaired.
	Exchanges uint64 `json:"exchanges"`
	Repairs   uint64 `json:"repairs"`
	// BlocksSent to it in repairs; BlocksReceived from it that changed the index.
	BlocksSent     uint64 `json:"blocksSent"`
	BlocksReceived uint64 `json:"blocksReceived"`
	LastOutcome    string `json:"lastOutcome,omitempty"`
}

// agreements are the peers, sorted.
func (a *antiEntropy) agreements(now time.Time) []PeerAgreement {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []PeerAgreement{}
	for id, ap := range a.peers {
		pa := PeerAgreement{Peer: id, Exchanges: ap.exchanges, Repairs: ap.repairs, BlocksSent: ap.blocksSent,
			BlocksReceived: ap.blocksReceived, LastOutcome: ap.lastOutcome}
		if !ap.lastAgreed.IsZero() {
			s := now.Sub(ap.lastAgreed).Seconds()
			pa.AgreedSecondsAgo = &s
		}
		out = append(out, pa)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}
