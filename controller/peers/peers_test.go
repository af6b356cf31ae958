package peers_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

func p(name, addr string, port int32) peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: "ns", Name: name, Address: addr, Port: port}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, cur []peers.PeerMetadata
		want     peers.Change
	}{
		{name: "identical sets: nothing", old: []peers.PeerMetadata{p("a", "10.0.0.1", 1)}, cur: []peers.PeerMetadata{p("a", "10.0.0.1", 1)}},
		{name: "order does not matter",
			old: []peers.PeerMetadata{p("a", "10.0.0.1", 1), p("b", "10.0.0.2", 1)},
			cur: []peers.PeerMetadata{p("b", "10.0.0.2", 1), p("a", "10.0.0.1", 1)}},
		{name: "added", cur: []peers.PeerMetadata{p("b", "10.0.0.2", 1), p("a", "10.0.0.1", 1)},
			want: peers.Change{Upserts: []peers.PeerMetadata{p("a", "10.0.0.1", 1), p("b", "10.0.0.2", 1)}}},
		{name: "removed", old: []peers.PeerMetadata{p("b", "10.0.0.2", 1), p("a", "10.0.0.1", 1)},
			want: peers.Change{Deletes: []string{"ns/a", "ns/b"}}},
		{name: "port change is an upsert", old: []peers.PeerMetadata{p("a", "10.0.0.1", 1)}, cur: []peers.PeerMetadata{p("a", "10.0.0.1", 2)},
			want: peers.Change{Upserts: []peers.PeerMetadata{p("a", "10.0.0.1", 2)}}},
		{name: "address change is an upsert", old: []peers.PeerMetadata{p("a", "10.0.0.1", 1)}, cur: []peers.PeerMetadata{p("a", "fd00::1", 1)},
			want: peers.Change{Upserts: []peers.PeerMetadata{p("a", "fd00::1", 1)}}},
		{name: "mixed",
			old:  []peers.PeerMetadata{p("a", "10.0.0.1", 1), p("b", "10.0.0.2", 1)},
			cur:  []peers.PeerMetadata{p("b", "10.0.0.2", 1), p("c", "10.0.0.3", 1)},
			want: peers.Change{Upserts: []peers.PeerMetadata{p("c", "10.0.0.3", 1)}, Deletes: []string{"ns/a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, peers.Diff(tc.old, tc.cur)); diff != "" {
				t.Fatalf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

// recorder is a PeerNotifier without batching: it sees individual calls.
type recorder struct{ calls []string }

func (r *recorder) UpsertPeer(p peers.PeerMetadata) { r.calls = append(r.calls, "upsert "+p.ID()) }
func (r *recorder) DeletePeer(id string)            { r.calls = append(r.calls, "delete "+id) }

func TestTrackerSendsOnlyChanges(t *testing.T) {
	rec := &recorder{}
	tr := peers.NewTracker(rec)
	tr.Publish([]peers.PeerMetadata{p("a", "10.0.0.1", 1), p("b", "10.0.0.2", 1)})
	tr.Publish([]peers.PeerMetadata{p("b", "10.0.0.2", 1), p("a", "10.0.0.1", 1)}) // same set: nothing
	tr.Publish([]peers.PeerMetadata{p("b", "10.0.0.2", 2), p("c", "10.0.0.3", 1)})
	want := []string{"upsert ns/a", "upsert ns/b", "delete ns/a", "upsert ns/b", "upsert ns/c"}
	if diff := cmp.Diff(want, rec.calls); diff != "" {
		t.Fatalf("notifier calls (-want +got):\n%s", diff)
	}
}

func TestTrackerDoesNotKeepCallerSlice(t *testing.T) {
	rec := &recorder{}
	tr := peers.NewTracker(rec)
	in := []peers.PeerMetadata{p("a", "10.0.0.1", 1)}
	tr.Publish(in)
	in[0].Port = 99 // caller reuses its slice
	tr.Publish([]peers.PeerMetadata{p("a", "10.0.0.1", 1)})
	if len(rec.calls) != 1 {
		t.Fatalf("calls %v: the tracker must copy the published set", rec.calls)
	}
}

func TestMemoryPeerStore(t *testing.T) {
	s := peers.NewMemoryPeerStore()
	if got := s.Peers(); got == nil || len(got) != 0 {
		t.Fatalf("empty store Peers() = %#v, want empty non-nil", got)
	}
	s.UpsertPeer(p("c", "10.0.0.3", 1))
	s.UpsertPeer(p("a", "10.0.0.1", 1))
	s.UpsertPeer(p("b", "10.0.0.2", 1))
	s.UpsertPeer(p("b", "10.0.0.2", 1)) // no-op: no new version
	s.DeletePeer("ns/c")
	s.DeletePeer("ns/unknown") // no-op
	snap := s.Snapshot()
	if diff := cmp.Diff([]peers.PeerMetadata{p("a", "10.0.0.1", 1), p("b", "10.0.0.2", 1)}, snap.Peers); diff != "" {
		t.Fatalf("peers (-want +got):\n%s", diff)
	}
	if snap.Version != 4 {
		t.Fatalf("version %d after 4 real changes and 2 no-ops, want 4", snap.Version)
	}
	if got, ok := s.Peer("ns/b"); !ok || got != p("b", "10.0.0.2", 1) {
		t.Fatalf("Peer(ns/b) = %v, %v", got, ok)
	}
	// The caller owns what Peers returns.
	got := s.Peers()
	got[0].Name = "mutated"
	if s.Peers()[0].Name != "a" {
		t.Fatal("mutating the result of Peers changed the store")
	}
}

func TestWaitForChangeCoalesces(t *testing.T) {
	s := peers.NewMemoryPeerStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A consumer that is not waiting misses nothing: it gets the newest set at once.
	s.UpsertPeer(p("a", "10.0.0.1", 1))
	s.UpsertPeer(p("b", "10.0.0.2", 1))
	s.DeletePeer("ns/a")
	snap, err := s.WaitForChange(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 3 || len(snap.Peers) != 1 || snap.Peers[0].Name != "b" {
		t.Fatalf("got %+v, want version 3 with only b", snap)
	}

	// A waiting consumer wakes on the next change.
	done := make(chan peers.Snapshot)
	go func() {
		s, err := s.WaitForChange(ctx, 3)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	select {
	case <-done:
		t.Fatal("WaitForChange returned before any change")
	case <-time.After(50 * time.Millisecond):
	}
	s.ApplyPeerChange(peers.Change{Upserts: []peers.PeerMetadata{p("c", "10.0.0.3", 1), p("d", "10.0.0.4", 1)}})
	if got := <-done; got.Version != 4 || len(got.Peers) != 3 {
		t.Fatalf("woke with %+v, want version 4 with 3 peers (a batch is one version)", got)
	}

	// Context end.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if _, err := s.WaitForChange(short, 4); err == nil {
		t.Fatal("WaitForChange without a change returned no error when its context ended")
	}
}

func TestMemoryPeerStoreConcurrent(t *testing.T) {
	s := peers.NewMemoryPeerStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				s.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: string(rune('a'+w)) + string(rune('0'+i%10)), Address: "10.0.0.1", Port: int32(i + 1)})
			}
		})
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var v uint64
		for v < writers*each {
			snap, err := s.WaitForChange(ctx, v)
			if err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			if snap.Version <= v {
				t.Errorf("version went from %d to %d", v, snap.Version)
				return
			}
			v = snap.Version
		}
	}()
	wg.Wait()
	<-readerDone
	if n := len(s.Peers()); n != writers*10 {
		t.Fatalf("%d peers, want %d", n, writers*10)
	}
}

func TestHostPort(t *testing.T) {
	if got := p("a", "fd00::1", 9005).HostPort(); got != "[fd00::1]:9005" {
		t.Fatalf("IPv6 HostPort = %q", got)
	}
	if got := p("a", "10.0.0.1", 9005).HostPort(); got != "10.0.0.1:9005" {
		t.Fatalf("IPv4 HostPort = %q", got)
	}
}

// callLog is a PeerNotifier that records its calls and the goroutine of each.
type callLog struct {
	mu      sync.Mutex
	calls   []string
	gids    map[uint64]bool
	block   chan struct{} // when set, the first call signals blocked, then waits for it
	blocked chan struct{}
}

func (c *callLog) record(s string) {
	if c.block != nil {
		close(c.blocked)
		<-c.block
		c.block = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
	c.gids[goroutineID()] = true
}

func (c *callLog) UpsertPeer(p peers.PeerMetadata) { c.record("upsert " + p.ID()) }
func (c *callLog) DeletePeer(id string)            { c.record("delete " + id) }

func (c *callLog) snapshot() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls), len(c.gids)
}

// goroutineID parses the current goroutine's number from its stack header.
func goroutineID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(strings.TrimPrefix(string(buf[:n]), "goroutine "))
	id, _ := strconv.ParseUint(f[0], 10, 64)
	return id
}

func TestFollowDeliversInOrderFromOneGoroutine(t *testing.T) {
	s := peers.NewMemoryPeerStore()
	s.UpsertPeer(p("a", "10.0.0.1", 1)) // before Follow: delivered as the initial set
	log := &callLog{gids: map[uint64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Follow(ctx, log); close(done) }()

	waitCalls := func(n int) []string {
		t.Helper()
		var calls []string
		wait.For(t, 5*time.Second, func() string {
			if calls, _ = log.snapshot(); len(calls) < n {
				return fmt.Sprintf("calls %v, want %d", calls, n)
			}
			return ""
		})
		return calls
	}
	waitCalls(1)
	// Changes from several goroutines: every call still comes from Follow's.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { s.UpsertPeer(p(fmt.Sprintf("w%d", i), "10.0.1.1", 1)) })
	}
	wg.Wait()
	waitCalls(5)
	s.UpsertPeer(p("b", "10.0.0.2", 1))
	waitCalls(6)
	s.DeletePeer("ns/b")
	calls := waitCalls(7)
	cancel()
	<-done // Follow returns when its context ends
	if calls[0] != "upsert ns/a" || calls[5] != "upsert ns/b" || calls[6] != "delete ns/b" {
		t.Fatalf("calls %v: want the initial set first and b's upsert before its delete", calls)
	}
	if _, g := log.snapshot(); g != 1 {
		t.Fatalf("calls came from %d goroutines, want 1", g)
	}
}

func TestFollowCoalescesForASlowNotifier(t *testing.T) {
	s := peers.NewMemoryPeerStore()
	release := make(chan struct{})
	log := &callLog{gids: map[uint64]bool{}, block: release, blocked: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Follow(ctx, log)
	s.UpsertPeer(p("a", "10.0.0.1", 1)) // the notifier blocks in this call
	<-log.blocked
	for i := 2; i <= 50; i++ { // meanwhile a's port changes 49 times and b comes and goes
		s.UpsertPeer(p("a", "10.0.0.1", int32(i)))
		s.UpsertPeer(p("b", "10.0.0.2", 1))
		s.DeletePeer("ns/b")
	}
	close(release)
	// A last change marks the end: once z is delivered, everything before it was.
	s.UpsertPeer(p("z", "10.0.0.26", 1))
	var calls []string
	wait.For(t, 5*time.Second, func() string {
		if calls, _ = log.snapshot(); len(calls) == 0 || calls[len(calls)-1] != "upsert ns/z" {
			return fmt.Sprintf("calls %v, want them to end with z's upsert", calls)
		}
		return ""
	})
	if strings.Join(calls, ",") != "upsert ns/a,upsert ns/a,upsert ns/z" {
		t.Fatalf("calls %v: a slow notifier gets the net change (a's newest port), not a backlog", calls)
	}
	if got, _ := s.Peer("ns/a"); got.Port != 50 {
		t.Fatalf("store has a at port %d", got.Port)
	}
}

// TestSnapshotStaysOrderedThroughEdits: the store edits its ordered view in place of
// sorting it again after small changes; after any sequence of changes, read or not
// in between, a snapshot is the set ordered by ID, and a snapshot already handed out
// never changes.
func TestSnapshotStaysOrderedThroughEdits(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	store := peers.NewMemoryPeerStore()
	want := map[string]peers.PeerMetadata{}
	for step := range 3000 {
		var c peers.Change
		n := 1 + rnd.IntN(4)
		if step%500 == 0 {
			n = 100 // more than the store edits one by one
		}
		used := map[string]bool{} // a change names each peer once
		for range n {
			ns := []string{"a", "b", "ns"}[rnd.IntN(3)]
			q := peers.PeerMetadata{Namespace: ns, Name: fmt.Sprintf("epp-%d", rnd.IntN(200)), Address: fmt.Sprintf("10.0.0.%d", rnd.IntN(9)), Port: 9005}
			if used[q.ID()] {
				continue
			}
			used[q.ID()] = true
			if rnd.IntN(3) == 0 {
				c.Deletes = append(c.Deletes, q.ID())
				delete(want, q.ID())
			} else {
				c.Upserts = append(c.Upserts, q)
				want[q.ID()] = q
			}
		}
		before := store.Snapshot()
		kept := slices.Clone(before.Peers)
		store.ApplyPeerChange(c)
		if !slices.Equal(before.Peers, kept) {
			t.Fatalf("step %d: a snapshot handed out earlier changed", step)
		}
		if rnd.IntN(4) == 0 {
			continue // no read: the next change starts from an unordered view
		}
		exp := slices.Collect(maps.Values(want))
		peers.SortByID(exp)
		if got := store.Snapshot().Peers; !slices.Equal(got, exp) {
			t.Fatalf("step %d: snapshot differs from the ordered set: %s", step, cmp.Diff(exp, got))
		}
	}
}

// TestFollowerEndsWithTheStoresSet: a follower that is sometimes slow (so it takes
// a few logged changes at once, or falls behind the log and compares the whole set)
// always ends with exactly the store's set, after any sequence of changes.
func TestFollowerEndsWithTheStoresSet(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	store := peers.NewMemoryPeerStore()
	follower := &slowStore{MemoryPeerStore: peers.NewMemoryPeerStore(), rnd: rand.New(rand.NewPCG(5, 6))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go store.Follow(ctx, follower)
	for round := range 20 {
		for range 1 + rnd.IntN(150) { // sometimes more than the store logs
			q := peers.PeerMetadata{Namespace: "ns", Name: fmt.Sprintf("epp-%d", rnd.IntN(50)), Address: fmt.Sprintf("10.0.0.%d", rnd.IntN(5)), Port: 9005}
			if rnd.IntN(3) == 0 {
				store.DeletePeer(q.ID())
			} else {
				store.UpsertPeer(q)
			}
		}
		want := store.Peers()
		wait.For(t, 5*time.Second, func() string {
			if got := follower.Peers(); !slices.Equal(got, want) {
				return fmt.Sprintf("round %d: the follower holds %v, the store %v", round, got, want)
			}
			return ""
		})
	}
}

// slowStore is a notifier that sometimes takes its time.
type slowStore struct {
	*peers.MemoryPeerStore
	mu  sync.Mutex
	rnd *rand.Rand
}

func (s *slowStore) ApplyPeerChange(c peers.Change) {
	s.mu.Lock()
	slow := s.rnd.IntN(4) == 0
	s.mu.Unlock()
	if slow {
		time.Sleep(time.Millisecond)
	}
	s.MemoryPeerStore.ApplyPeerChange(c)
}

// BenchmarkFollowOneChange: what a follower pays for one changed peer in a set of
// 10,000 (the store's log), beside comparing the whole set (what Follow did before).
func BenchmarkFollowOneChange(b *testing.B) {
	const n = 10000
	set := make([]peers.PeerMetadata, n)
	for i := range set {
		set[i] = peers.PeerMetadata{Namespace: "ns", Name: fmt.Sprintf("epp-%05d", i), Address: "10.0.0.1", Port: 9005}
	}
	b.Run("follow", func(b *testing.B) {
		store := peers.NewMemoryPeerStore()
		store.ApplyPeerChange(peers.Change{Upserts: set})
		follower := &countingNotifier{applied: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go store.FollowFrom(ctx, follower, store.Snapshot())
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-00001", Address: "10.0.0.1", Port: int32(10000 + i%2)})
			<-follower.applied
		}
	})
	b.Run("whole-set-diff", func(b *testing.B) {
		cur := slices.Clone(set)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			old := cur
			cur = slices.Clone(cur)
			cur[1].Port = int32(10000 + i%2)
			_ = peers.Diff(old, cur)
		}
	})
}

type countingNotifier struct{ applied chan struct{} }

func (c *countingNotifier) UpsertPeer(peers.PeerMetadata) { c.applied <- struct{}{} }
func (c *countingNotifier) DeletePeer(string)             { c.applied <- struct{}{} }
