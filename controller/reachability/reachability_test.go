package reachability_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// fakeNet is the dialer of the tests: each address is up or down, and an address
// can be made to hang until its probe is cancelled. It records every dial.
type fakeNet struct {
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	down  map[string]bool
	hang  map[string]bool
	calls map[string][]time.Time
	// inFlight and maxInFlight count concurrent dials per address.
	inFlight, maxInFlight map[string]int
	cancelled             map[string]int
}

func newFakeNet(c *clocktesting.FakeClock) *fakeNet {
	return &fakeNet{clock: c, down: map[string]bool{}, hang: map[string]bool{}, calls: map[string][]time.Time{},
		inFlight: map[string]int{}, maxInFlight: map[string]int{}, cancelled: map[string]int{}}
}

func (f *fakeNet) dial(ctx context.Context, addr string) error {
	f.mu.Lock()
	f.calls[addr] = append(f.calls[addr], f.clock.Now())
	f.inFlight[addr]++
	f.maxInFlight[addr] = max(f.maxInFlight[addr], f.inFlight[addr])
	hang, down := f.hang[addr], f.down[addr]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight[addr]--
		f.mu.Unlock()
	}()
	if hang {
		<-ctx.Done()
		f.mu.Lock()
		f.cancelled[addr]++
		f.mu.Unlock()
		return ctx.Err()
	}
	if down {
		return errors.New("connect: connection refused")
	}
	return nil
}

func (f *fakeNet) set(addr string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[addr] = down
}

func (f *fakeNet) dials(addr string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls[addr]...)
}

func (f *fakeNet) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += len(c)
	}
	return n
}

func peer(i int) peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: "ns", Name: fmt.Sprintf("epp-%03d", i), Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 9005, Ready: true, Serving: true}
}

type harness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	net    *fakeNet
	store  *peers.MemoryPeerStore
	prober *reachability.Prober
	stop   func()
}

// start runs a prober over n peers with a fake clock and network.
func start(t *testing.T, n int, opts reachability.Options) *harness {
	t.Helper()
	h := &harness{t: t, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)), store: peers.NewMemoryPeerStore()}
	h.net = newFakeNet(h.clock)
	opts.Clock, opts.Dial = h.clock, h.net.dial
	var err error
	if h.prober, err = reachability.New(opts, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	var set []peers.PeerMetadata
	for i := range n {
		set = append(set, peer(i))
	}
	h.store.ApplyPeerChange(peers.Change{Upserts: set})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.prober.Run(ctx, h.store); close(done) }()
	h.stop = func() { cancel(); <-done }
	t.Cleanup(h.stop)
	return h
}

// settle waits (in real time, at most 5 s) until want goroutines wait on the fake
// clock: every probe loop is asleep and nothing is in flight but what hangs.
func (h *harness) settle(want int) {
	h.t.Helper()
	wait.For(h.t, 5*time.Second, func() string {
		if got := h.clock.Waiters(); got != want {
			return fmt.Sprintf("%d goroutines wait on the clock, want %d", got, want)
		}
		return ""
	})
}

// advance moves the fake clock by total in steps, letting the probe loops (waiters
// of them) run after each step.
func (h *harness) advance(total, step time.Duration, waiters int) {
	h.t.Helper()
	for moved := time.Duration(0); moved < total; moved += step {
		h.settle(waiters)
		h.clock.Step(step)
	}
	h.settle(waiters)
}

func TestReachabilityFollowsThePeers(t *testing.T) {
	h := start(t, 3, reachability.Options{Interval: 5 * time.Second})
	down := peer(1)
	h.net.set(down.HostPort(), true)
	// Every peer's first probe is within one interval, and the rate cap may space the
	// three by up to two of its gaps (two first probes due in the same step of the
	// fake clock go out one gap apart).
	gap := time.Duration(float64(time.Second) / reachability.DefaultMaxRate)
	h.advance(5*time.Second+2*gap, 50*time.Millisecond, 3)
	for i := range 3 {
		st, ok := h.prober.Status(peer(i).ID())
		if !ok || !st.Probed {
			t.Fatalf("%s not probed after one interval: %+v", peer(i).ID(), st)
		}
		if st.Reachable == (i == 1) {
			t.Errorf("%s reachable=%v, want %v (%+v)", peer(i).ID(), st.Reachable, i != 1, st)
		}
	}
	if st, _ := h.prober.Status(down.ID()); st.Error != "connect: connection refused" {
		t.Errorf("error of the unreachable peer: %q", st.Error)
	}
	// It comes back: reachable again within two intervals.
	h.net.set(down.HostPort(), false)
	h.advance(2*5*time.Second, 100*time.Millisecond, 3)
	if st, _ := h.prober.Status(down.ID()); !st.Reachable || st.Error != "" {
		t.Errorf("%s after it came back: %+v", down.ID(), st)
	}
}

// TestProbesAreBounded: one probe in flight per peer however long it takes (a hung
// connection is given up at the timeout), and no more than MaxRate probes per
// second across all peers.
func TestProbesAreBounded(t *testing.T) {
	const n = 100
	h := start(t, n, reachability.Options{Interval: time.Second, MaxRate: 10})
	hung := peer(7)
	h.net.mu.Lock()
	h.net.hang[hung.HostPort()] = true
	h.net.mu.Unlock()
	began := h.clock.Now()
	// Every goroutine waits on the clock: asleep, queued for the rate, or (the hung
	// one) for its probe's timeout.
	h.advance(30*time.Second, 50*time.Millisecond, n)
	for addr, m := range h.net.maxInFlight {
		if m > 1 {
			t.Errorf("%s had %d probes in flight at once", addr, m)
		}
	}
	if st, _ := h.prober.Status(hung.ID()); !st.Probed || st.Reachable || st.Error != "timeout" {
		t.Errorf("the hung peer: %+v, want unreachable with a timeout", st)
	}
	elapsed := h.clock.Since(began).Seconds()
	probes := h.net.total()
	if limit := int(10*elapsed) + 1; probes > limit {
		t.Errorf("%d probes in %.0f s, the cap allows %d", probes, elapsed, limit)
	}
	if probes < int(10*elapsed)*8/10 {
		t.Errorf("only %d probes in %.0f s with 100 peers due every second and a cap of 10/s", probes, elapsed)
	}
}

// TestJitter: peers that appear together are first probed at times spread over one
// interval, and each peer's later probes come every interval ±20%.
func TestJitter(t *testing.T) {
	const n = 50
	interval := 10 * time.Second
	h := start(t, n, reachability.Options{Interval: interval, MaxRate: 1000})
	began := h.clock.Now()
	h.advance(5*interval, 100*time.Millisecond, n)
	buckets := map[int]int{}
	for i := range n {
		ds := h.net.dials(peer(i).HostPort())
		if len(ds) < 4 {
			t.Fatalf("%s probed %d times in 5 intervals", peer(i).ID(), len(ds))
		}
		buckets[int(ds[0].Sub(began)/time.Second)]++
		for j := 1; j < len(ds); j++ {
			if gap := ds[j].Sub(ds[j-1]); gap < 8*time.Second-100*time.Millisecond || gap > 12*time.Second+100*time.Millisecond {
				t.Errorf("%s: %v between probes, want 10 s ±20%%", peer(i).ID(), gap)
			}
		}
	}
	if len(buckets) < 6 {
		t.Errorf("first probes of %d peers fell in %d of 10 seconds: not spread (%v)", n, len(buckets), buckets)
	}
	for s, c := range buckets {
		if c > n/3 {
			t.Errorf("%d of %d first probes in second %d: a burst", c, n, s)
		}
	}
}

// TestPeerLeavingMidProbe: a peer that leaves while its probe hangs has the probe
// cancelled, no result, and no further probes; the others go on.
func TestPeerLeavingMidProbe(t *testing.T) {
	h := start(t, 3, reachability.Options{Interval: time.Second, Timeout: time.Hour})
	leaving := peer(2)
	h.net.mu.Lock()
	h.net.hang[leaving.HostPort()] = true
	h.net.mu.Unlock()
	for moved := time.Duration(0); len(h.net.dials(leaving.HostPort())) == 0; moved += 100 * time.Millisecond {
		if moved > 5*time.Second {
			t.Fatal("never probed")
		}
		h.settle(3)
		h.clock.Step(100 * time.Millisecond)
	}
	h.settle(3) // two asleep, and the hung probe's timeout
	h.store.ApplyPeerChange(peers.Change{Deletes: []string{leaving.ID()}})
	wait.Until(t, 5*time.Second, "the probe of the peer that left to be cancelled", func() bool {
		h.net.mu.Lock()
		defer h.net.mu.Unlock()
		return h.net.cancelled[leaving.HostPort()] == 1
	})
	h.advance(5*time.Second, 100*time.Millisecond, 2)
	if got := len(h.net.dials(leaving.HostPort())); got != 1 {
		t.Errorf("the peer that left was dialled %d times", got)
	}
	if st, ok := h.prober.Status(leaving.ID()); ok {
		t.Errorf("status kept for a peer that left: %+v", st)
	}
	if st, _ := h.prober.Status(peer(0).ID()); !st.Reachable {
		t.Errorf("the others stopped: %+v", st)
	}
}

func TestOptions(t *testing.T) {
	if _, err := reachability.New(reachability.Options{}, logr.Discard()); err == nil {
		t.Error("no interval accepted")
	}
}
