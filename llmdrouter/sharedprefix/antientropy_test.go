package sharedprefix

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
)

// The tests of this file run anti-entropy between replicas of the index in one
// process, over an in-memory transport that keeps each pair's messages in order
// and can cut a pair (the tests over real connections are in sharing_test.go and
// the llm-d-router integration suite).

// memNet connects replicas by name.
type memNet struct {
	mu     sync.Mutex
	nodes  map[string]*Plugin
	cut    map[string]bool // "a>b"
	queues map[string]chan []byte
	errs   []error
	bytes  map[string]int // sent by a to b, "a>b"
}

func newMemNet() *memNet {
	return &memNet{nodes: map[string]*Plugin{}, cut: map[string]bool{}, queues: map[string]chan []byte{}, bytes: map[string]int{}}
}

type memTransport struct {
	n    *memNet
	self string
}

func (t memTransport) Peers() []string {
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	var out []string
	for name := range t.n.nodes {
		if name != t.self && !t.n.cut[t.self+">"+name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (t memTransport) SendTo(ctx context.Context, peer string, msg []byte) error {
	n := t.n
	key := t.self + ">" + peer
	n.mu.Lock()
	dst := n.nodes[peer]
	if dst == nil || n.cut[key] {
		n.mu.Unlock()
		return peersync.ErrNotConnected
	}
	q := n.queues[key]
	if q == nil {
		q = make(chan []byte, 1<<16)
		n.queues[key] = q
		from := t.self
		go func() {
			for m := range q {
				if err := dst.ae.receive(from, m); err != nil {
					n.mu.Lock()
					n.errs = append(n.errs, fmt.Errorf("%s from %s: %w", peer, from, err))
					n.mu.Unlock()
				}
			}
		}()
	}
	n.bytes[key] += len(msg)
	n.mu.Unlock()
	select {
	case q <- slices.Clone(msg):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *memNet) errors() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.errs)
}

// memReplica is a replica of the index whose pool is servers, of capacity.
func (n *memNet) replica(t *testing.T, name string, servers []string, capacity int, interval time.Duration) *Plugin {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &Plugin{p: Parameters{LRUCapacityPerServer: capacity}, idx: newIndex(), log: logr.Discard(), m: metricsFor("ae-" + t.Name() + "-" + name), ctx: ctx}
	pool := map[string]struct{}{}
	for _, s := range servers {
		pool[s] = struct{}{}
	}
	p.pool.Store(&pool)
	p.ae = newAntiEntropy(p, interval)
	p.ae.tr = memTransport{n: n, self: name}
	n.mu.Lock()
	n.nodes[name] = p
	n.mu.Unlock()
	return p
}

// exchange runs one exchange that a opens with b, and waits until b's side is
// over too.
func exchange(t *testing.T, a *Plugin, b string) string {
	t.Helper()
	o := newSide(b, rand.Uint64())
	a.ae.mu.Lock()
	a.ae.opening[b] = o
	a.ae.mu.Unlock()
	outcome, _, _ := a.ae.exchange(context.Background(), o)
	a.ae.mu.Lock()
	delete(a.ae.opening, b)
	a.ae.mu.Unlock()
	return outcome
}

// settle waits until no replica of n has an exchange it answers still running.
func (n *memNet) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		n.mu.Lock()
		for _, p := range n.nodes {
			p.ae.mu.Lock()
			for _, ap := range p.ae.peers {
				busy = busy || ap.incoming != nil
			}
			p.ae.mu.Unlock()
		}
		n.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("an exchange still runs after 10 s")
}

func sameIndexes(a, b *Plugin, servers []string) bool {
	for _, s := range servers {
		if !maps.Equal(contents(a.idx, s), contents(b.idx, s)) {
			return false
		}
	}
	return true
}

// aged makes the index's leaves look unchanged for longer than inFlight: the
// tests apply placements and compare at once, with no traffic in flight.
func aged(ps ...*Plugin) {
	for _, p := range ps {
		p.idx.mu.Lock()
		p.idx.epoch = p.idx.epoch.Add(-time.Hour)
		for _, s := range p.idx.servers {
			clear(s.modified[:])
		}
		p.idx.mu.Unlock()
	}
}

// TestAnExchangeRepairsWhatTheLivePlacementsMissed: two replicas whose full
// servers each missed a fifth of the placements the other took (a connection gap,
// a backlog) hold the same after one exchange, either one opening it, and an
// exchange between replicas that hold the same finds nothing to repair. Without
// the exchange they differ.
func TestAnExchangeRepairsWhatTheLivePlacementsMissed(t *testing.T) {
	servers := []string{"ns/a", "ns/b", "ns/c"}
	const capacity = 500
	for seed := range uint64(4) {
		n := newMemNet()
		a := n.replica(t, "a", servers, capacity, time.Second)
		b := n.replica(t, "b", servers, capacity, time.Second)
		rng := rand.New(rand.NewPCG(seed, 11))
		for _, o := range workloadOf(rng, 3000, 200, servers) {
			for _, p := range []*Plugin{a, b} {
				if rng.Float64() < 0.2 {
					continue // lost on its way to p
				}
				p.idx.apply(o.server, capacity, o.at, 0, o.hashes)
			}
		}
		aged(a, b)
		for _, s := range servers {
			if len(contents(a.idx, s)) != capacity {
				t.Fatalf("server %s holds %d blocks: not full", s, len(contents(a.idx, s)))
			}
		}
		if sameIndexes(a, b, servers) {
			t.Fatal("the replicas hold the same before any exchange: the losses changed nothing")
		}
		opener := a
		if seed%2 == 1 {
			opener = b
		}
		other := map[*Plugin]string{a: "b", b: "a"}[opener]
		if got := exchange(t, opener, other); got != outcomeRepaired {
			t.Fatalf("seed %d: outcome %s, want repaired", seed, got)
		}
		n.settle(t)
		if !sameIndexes(a, b, servers) {
			t.Fatalf("seed %d: the replicas differ after an exchange", seed)
		}
		aged(a, b)
		if got := exchange(t, opener, other); got != outcomeAgreed {
			t.Errorf("seed %d: an exchange between replicas that hold the same: %s, want agreed", seed, got)
		}
		n.settle(t)
		if errs := n.errors(); len(errs) != 0 {
			t.Fatalf("messages refused: %v", errs)
		}
	}
}

// TestAConnectionThatFlapsDoesNotGetAReplicaCutOff: a connection that comes up
// again and again (a peer restarting in a loop, a flaky network) makes a replica
// compare at once each time, but never open more exchanges than its peer allows
// (opensPerInterval an interval): the peer, counting opens, would cut it off for
// exchange-rate, and the cut would bring the connection up once more. The two
// still agree at the end.
func TestAConnectionThatFlapsDoesNotGetAReplicaCutOff(t *testing.T) {
	servers := []string{"ns/a", "ns/b"}
	const capacity, interval = 200, 400 * time.Millisecond
	n := newMemNet()
	a := n.replica(t, "a", servers, capacity, interval)
	b := n.replica(t, "b", servers, capacity, interval)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, o := range workloadOf(rng, 500, 100, servers) {
		a.idx.apply(o.server, capacity, o.at, 0, o.hashes)
	}
	aged(a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened0 := openedBy(a) // the metrics outlive a run of the test (-count)
	stopped := make(chan struct{})
	go func() { a.ae.run(ctx); close(stopped) }()
	const flapping = 2 * time.Second
	for end := time.Now().Add(flapping); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		a.ae.connected("b")
	}
	n.settle(t)
	opened := openedBy(a) - opened0
	if limit := float64(flapping/interval*opensPerInterval + opensPerInterval); opened > limit {
		t.Errorf("a opened %.0f exchanges with b in %v of 200 reconnections, want %.0f at most (%d an interval of %v)", opened, flapping, limit, opensPerInterval, interval)
	}
	if opened < float64(flapping/interval) {
		t.Errorf("a opened %.0f exchanges with b in %v of reconnections, want one an interval at least", opened, flapping)
	}
	if errs := n.errors(); len(errs) != 0 {
		t.Fatalf("b refused a's messages: %v", errs)
	}
	cancel()
	<-stopped // its last exchange over, so it leaves a.ae.opening alone
	aged(a, b)
	if got := exchange(t, a, "b"); got != outcomeAgreed {
		t.Errorf("after the flapping: %s, want agreed", got)
	}
}

// openedBy is how many exchanges p opened, whatever their outcome.
func openedBy(p *Plugin) (n float64) {
	for _, o := range []string{outcomeAgreed, outcomeRepaired, outcomeNotReady, outcomeTimeout, outcomeFailed} {
		n += testutil.ToFloat64(p.m.exchanges.WithLabelValues("opened", o))
	}
	return n
}

// TestAReplicaThatStartsFillsItsIndexFromEveryPeer: bootstrap is the same exchange
// from an empty index. A replica that starts empty holds what its peers hold after
// an exchange with each, even when each peer holds what the other lacks (a peer
// whose publisher died before the other got its placements): nothing needs the
// publisher, nor a peer chosen to ask.
func TestAReplicaThatStartsFillsItsIndexFromEveryPeer(t *testing.T) {
	servers := []string{"ns/a", "ns/b"}
	const capacity = 400
	n := newMemNet()
	b := n.replica(t, "b", servers, capacity, time.Second)
	c := n.replica(t, "c", servers, capacity, time.Second)
	rng := rand.New(rand.NewPCG(5, 5))
	ops := workloadOf(rng, 2000, 100, servers)
	for i, o := range ops {
		switch i % 10 {
		case 0:
			b.idx.apply(o.server, capacity, o.at, 0, o.hashes) // published by a replica since killed, before c got it
		case 1:
			c.idx.apply(o.server, capacity, o.at, 0, o.hashes)
		default:
			b.idx.apply(o.server, capacity, o.at, 0, o.hashes)
			c.idx.apply(o.server, capacity, o.at, 0, o.hashes)
		}
	}
	ref := newIndex()
	applyAll(ref, capacity, ops)
	d := n.replica(t, "d", servers, capacity, time.Second)
	aged(b, c, d)
	for _, peer := range []string{"b", "c"} {
		if got := exchange(t, d, peer); got != outcomeRepaired {
			t.Fatalf("d's exchange with %s: %s, want repaired", peer, got)
		}
		n.settle(t)
		aged(b, c, d)
	}
	if got := exchange(t, b, "c"); got != outcomeRepaired {
		t.Fatalf("b's exchange with c: %s", got)
	}
	n.settle(t)
	for _, p := range []*Plugin{b, c, d} {
		for _, s := range servers {
			if !maps.Equal(contents(p.idx, s), contents(ref, s)) {
				t.Fatalf("a replica's server %s differs from every placement merged", s)
			}
		}
	}
}

// TestUnderTrafficAnExchangeRepairsOnlyWhatDiffers: while placements are on their
// way (each reaches the peer a few milliseconds after its replica took it),
// exchanges between replicas that lose nothing find nothing to repair: the leaves
// that changed within inFlight on either side are compared later. So anti-entropy
// costs what differs, not what is in flight (a placement delayed past inFlight on a
// loaded machine is a difference, and costs its blocks).
func TestUnderTrafficAnExchangeRepairsOnlyWhatDiffers(t *testing.T) {
	servers := []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	const capacity = 2000
	n := newMemNet()
	// An exchange every 50 ms: within what a peer may open at an interval of 100 ms.
	a := n.replica(t, "a", servers, capacity, 100*time.Millisecond)
	b := n.replica(t, "b", servers, capacity, 100*time.Millisecond)
	rng := rand.New(rand.NewPCG(9, 9))
	ops := workloadOf(rng, 100000, 2000, servers)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i, o := range ops {
			select {
			case <-stop:
				return
			default:
			}
			at := time.Now().UnixMicro()
			origin, peer := a, b
			if i%2 == 1 {
				origin, peer = b, a
			}
			origin.idx.apply(o.server, capacity, at, 0, o.hashes)
			time.AfterFunc(time.Duration(2+rng.IntN(8))*time.Millisecond, func() { peer.idx.apply(o.server, capacity, at, 0, o.hashes) })
			time.Sleep(200 * time.Microsecond) // about 5,000 placements a second
		}
	})
	time.Sleep(300 * time.Millisecond)
	outcomes := map[string]int{}
	for range 20 {
		outcomes[exchange(t, a, "b")]++
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	n.settle(t)
	sent, received := 0.0, 0.0
	for _, p := range []*Plugin{a, b} {
		sent += testutil.ToFloat64(p.m.repairBlocks.WithLabelValues("sent"))
		received += testutil.ToFloat64(p.m.repairBlocks.WithLabelValues("received"))
	}
	t.Logf("20 exchanges under traffic: %v; blocks sent %v, of which changed an index %v", outcomes, sent, received)
	if errs := n.errors(); len(errs) != 0 {
		t.Fatalf("messages refused: %v", errs)
	}
	// A placement later than inFlight (a timer late on a loaded machine) is a
	// difference, and repaired: a few blocks, not what is in flight (with no
	// exclusion, all 20 exchanges repaired, about 1,400 blocks sent).
	if outcomes[outcomeAgreed] < 15 || sent > 200 {
		t.Errorf("exchanges between replicas that lose nothing: %v, %v blocks sent (%v changed an index): want mostly agreed, a few blocks at most", outcomes, sent, received)
	}
}

// dropTransport takes every message and delivers none.
type dropTransport struct{}

func (dropTransport) SendTo(context.Context, string, []byte) error { return nil }
func (dropTransport) Peers() []string                              { return nil }

// FuzzExchangeMessage: any bytes, as a part of an exchange's message from a peer,
// are taken or refused with an error (the peer is cut off); nothing panics, and a
// control message that parses is within its bounds and encodes back to itself.
func FuzzExchangeMessage(f *testing.F) {
	open := controlBody(control{Recent: map[string][]int{"llm/a": {1, 4095}}, Roots: []rootInfo{{Server: "llm/a", Capacity: 100, Blocks: 3, Digest: 9}}})
	f.Add(append(header(msgOpen, 1, flagFinal), open...))
	f.Add(append(header(msgLeaves, 1, flagFinal), controlBody(control{Leaves: []digestVector{{Server: "llm/a", Group: 3, Digests: make([]byte, 512)}}})...))
	f.Add(entryParts(msgEntries, 1, 1<<16, []leafEntries{{server: "llm/a", leaf: 7, entries: []entry{{hash: 1, stamp: 2}}}})[0])
	f.Add(entryParts(msgEntriesBack, 2, 1<<16, nil)[0])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &Plugin{p: Parameters{LRUCapacityPerServer: 100}, idx: newIndex(), log: logr.Discard(), m: metricsFor("fuzz-exchange"), ctx: ctx}
	pool := map[string]struct{}{"llm/a": {}}
	p.pool.Store(&pool)
	p.ae = newAntiEntropy(p, time.Second)
	p.ae.tr = dropTransport{}
	p.idx.route("llm/a", 100, hs(1, 2, 3), 10)
	f.Fuzz(func(t *testing.T, msg []byte) {
		_ = p.ae.receive("ns/peer", msg)
		kind, _, _, payload, err := parseHeader(msg)
		if err != nil {
			return
		}
		switch kind {
		case msgEntries, msgEntriesBack:
			r := &reader{b: payload}
			for _, rec := range parseEntries(r) {
				if r.err() == nil && (rec.leaf < 0 || rec.leaf >= leafCount) {
					t.Fatalf("a record of leaf %d parsed", rec.leaf)
				}
			}
		default:
			c, err := parseControl(payload)
			if err != nil {
				return
			}
			again, err := parseControl(controlBody(*c))
			if err != nil || !reflect.DeepEqual(c, again) {
				t.Fatalf("a control message does not encode back to itself: %v", err)
			}
		}
	})
}
