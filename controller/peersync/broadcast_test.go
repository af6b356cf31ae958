package peersync

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// inbox records what a replica's broadcast received.
type inbox struct {
	mu   sync.Mutex
	msgs map[string][]string // by peer
	at   map[string]time.Time
}

func newInbox() *inbox { return &inbox{msgs: map[string][]string{}, at: map[string]time.Time{}} }

func (in *inbox) receive(peer string, msg []byte) error {
	if string(msg) == "bad!" {
		return fmt.Errorf("not a message of this broadcast")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.msgs[peer] = append(in.msgs[peer], string(msg))
	in.at[string(msg)] = time.Now()
	return nil
}

func (in *inbox) has(msg string) (time.Time, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	t, ok := in.at[msg]
	return t, ok
}

func (in *inbox) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.at)
}

// TestBroadcastReachesEveryPeerWithinTheWindow: a message published on one replica
// reaches every peer's Receive, tagged with the publisher, within the window and a
// write (p99 logged; the bound leaves room for a loaded machine), many messages of
// one window in one frame; a message the receiver refuses closes the publisher's
// connection, counted as malformed, and the next connection goes on.
func TestBroadcastReachesEveryPeerWithinTheWindow(t *testing.T) {
	rs := newCluster(t, 3)
	boxes := make([]*inbox, len(rs))
	bs := make([]*Broadcast, len(rs))
	for i, r := range rs {
		boxes[i] = newInbox()
		b, err := r.s.Broadcast("placements", BroadcastOptions{Receive: boxes[i].receive})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	// Connected, and every connection knows its peer takes broadcasts.
	waitForBroadcastConns(t, rs)
	var lat []time.Duration
	for i := range 100 {
		msg := fmt.Sprintf("msg-%d", i)
		sent := time.Now()
		bs[0].Publish([]byte(msg))
		for _, box := range boxes[1:] {
			wait.Until(t, 5*time.Second, msg+" to arrive", func() bool { _, ok := box.has(msg); return ok })
			at, _ := box.has(msg)
			lat = append(lat, at.Sub(sent))
		}
	}
	t.Logf("published to received: p50 %v, p99 %v (window %v)", stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), DefaultBroadcastWindow)
	if p99 := stats.Percentile(lat, 0.99); p99 > 500*time.Millisecond {
		t.Errorf("p99 %v from Publish to a peer's Receive, want within the window (%v) and a write", p99, DefaultBroadcastWindow)
	}
	boxes[1].mu.Lock()
	if got := boxes[1].msgs["ns/epp-0"]; len(got) != 100 {
		t.Errorf("replica 1 got %d messages from ns/epp-0, want 100 (by peer: %v)", len(got), keysOf(boxes[1].msgs))
	}
	boxes[1].mu.Unlock()

	// 1,000 messages at once: a few frames, not one per message.
	frames0 := testutil.ToFloat64(broadcastMessages.WithLabelValues(rs[0].instance, "placements", "sent"))
	for i := range 1000 {
		bs[0].Publish([]byte(fmt.Sprintf("burst-%d", i)))
	}
	wait.For(t, 5*time.Second, func() string {
		if boxes[2].count() == 1100 {
			return ""
		}
		return fmt.Sprintf("replica 2 has %d of 1,100 messages", boxes[2].count())
	})
	if frames := testutil.ToFloat64(broadcastMessages.WithLabelValues(rs[0].instance, "placements", "sent")) - frames0; frames > 20 {
		t.Errorf("1,000 messages published at once took %v frames", frames)
	}

	before := rs[1].rejected(RejectMalformed)
	bs[0].Publish([]byte("bad!"))
	rs[1].waitRejected(t, 2*time.Second, RejectMalformed, before, "a message Receive refuses")
	wait.Until(t, 5*time.Second, "a message after a refused one, on the next connection", func() bool {
		bs[0].Publish([]byte("after"))
		time.Sleep(20 * time.Millisecond)
		_, ok := boxes[1].has("after")
		return ok
	})
}

func keysOf(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func waitForBroadcastConns(t *testing.T, rs []*replica) {
	t.Helper()
	wait.Until(t, 5*time.Second, "every replica's connections to take broadcasts", func() bool {
		for _, r := range rs {
			r.s.mu.Lock()
			outs := r.s.outStreams()
			r.s.mu.Unlock()
			if len(outs) != len(rs)-1 {
				return false
			}
			for _, o := range outs {
				if c := o.conn.Load(); c == nil || !c.broadcasts.Load() {
					return false
				}
			}
		}
		return true
	})
}

// TestABusyReplicaKeepsThePeerItReads: a replica that spends longer than the TTL
// handling one of a peer's messages (a snapshot's frame on a loaded machine) has
// not heard silence: the peer's values go on counting and its next messages arrive.
// Before, the silence was measured from the message's arrival, the replica closed
// the connection as silent for the TTL and lost what was already on its way (the
// rest of a shared prefix index's snapshot: a replica under make test's load
// stayed cold).
func TestABusyReplicaKeepsThePeerItReads(t *testing.T) {
	rs := newCluster(t, 2)
	ttl := 25 * testInterval // newCluster's
	box := newInbox()
	busy := func(peer string, msg []byte) error {
		if string(msg) == "slow" {
			time.Sleep(2 * ttl)
		}
		return box.receive(peer, msg)
	}
	a, err := rs[0].s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs[1].s.Broadcast("index", BroadcastOptions{Receive: busy}); err != nil {
		t.Fatal(err)
	}
	waitForBroadcastConns(t, rs)
	for i, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 3)
	ttlExpired := func() float64 { return testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeTTL)) }
	before := ttlExpired()
	a.Publish([]byte("slow"))
	time.Sleep(ttl / 2) // "slow" is handled alone; "after" arrives while it is
	a.Publish([]byte("after"))
	wait.Until(t, 4*ttl, "the message published while the replica handled the slow one", func() bool { _, ok := box.has("after"); return ok })
	if n := ttlExpired() - before; n != 0 {
		t.Errorf("%v of the peer's values expired as silent for the TTL while this replica was busy with its message", n)
	}
}

// TestBroadcastOfUnknownNameIsCountedNotFatal: a peer that has no broadcast of that
// name counts each frame as unknown-broadcast and goes on with the state.
func TestBroadcastOfUnknownNameIsCountedNotFatal(t *testing.T) {
	rs := newCluster(t, 2)
	b, err := rs[0].s.Broadcast("only-here", BroadcastOptions{Receive: newInbox().receive})
	if err != nil {
		t.Fatal(err)
	}
	waitForBroadcastConns(t, rs)
	before := rs[1].rejected(RejectUnknownBroadcast)
	b.Publish([]byte("xxxx"))
	rs[1].waitRejected(t, 2*time.Second, RejectUnknownBroadcast, before, "a broadcast the peer has not")
	for i, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 3)
}

// TestEarlierVersionListenersGetStatesOnly: a listener of the first version (it
// sends no features line), and one of the version that numbered its broadcast
// frames and asked for snapshots and resends (its features are "broadcast" and
// "broadcast-seq"), never get a broadcast frame, which they would have refused as
// malformed or taken for another form, closing the connection: replicas of two
// versions go on syncing state during a rolling update.
func TestEarlierVersionListenersGetStatesOnly(t *testing.T) {
	for name, features := range map[string]string{"first": "", "log": wire.FeaturesLine("broadcast", "broadcast-seq")} {
		t.Run(name, func(t *testing.T) { earlierListenerGetsStatesOnly(t, features) })
	}
}

func earlierListenerGetsStatesOnly(t *testing.T, features string) {
	rs := newCluster(t, 1)
	b, err := rs[0].s.Broadcast("placements", BroadcastOptions{Receive: newInbox().receive})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	rs[0].members.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "old", Address: "127.0.0.1", Port: int32(port), Ready: true, Serving: true})
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("epp-peer-discovery ns/old\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	pre := make([]byte, len(wire.Preface))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.Read(pre); err != nil || string(pre) != wire.Preface {
		t.Fatalf("preface %q: %v", pre, err)
	}
	if _, err := wire.ReadFrame(br, 1<<20); err != nil { // the hello
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, features); err != nil {
		t.Fatal(err)
	}
	if err := rs[0].s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	// A window, not a wait: for a second of placements published, every frame the
	// listener reads must be a state (a broadcast frame can come at any time in it).
	deadline := time.Now().Add(1 * time.Second)
	states := 0
	for time.Now().Before(deadline) {
		b.Publish([]byte("placement"))
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := binary.ReadUvarint(br)
		if err != nil {
			continue
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if ft := wire.FrameType(body); ft != wire.TypeState {
			t.Fatalf("a listener of an earlier version got a frame of type %d", ft)
		}
		states++
	}
	if states == 0 {
		t.Fatal("the listener got no state at all")
	}
}

// TestWindowsFallOnTheWallClocksGrid: a window is flushed at the end of its interval
// of the wall clock's grid, the same instant on every replica whenever each one's
// first message came, within the window (or at the read tick, when there is one).
func TestWindowsFallOnTheWallClocksGrid(t *testing.T) {
	s := &Syncer{}
	b := &Broadcast{s: s, o: BroadcastOptions{Window: 10 * time.Millisecond}}
	base := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		after, want time.Duration
	}{
		{0, 10 * time.Millisecond},
		{time.Microsecond, 10 * time.Millisecond},
		{3 * time.Millisecond, 10 * time.Millisecond},
		{9999 * time.Microsecond, 10 * time.Millisecond},
		{10 * time.Millisecond, 20 * time.Millisecond},
		{17 * time.Millisecond, 20 * time.Millisecond},
	} {
		if got := b.flushAt(base.Add(c.after)).Sub(base); got != c.want {
			t.Errorf("a window opened %v past a grid instant flushes %v past it, want %v", c.after, got, c.want)
		}
	}
	s.o.ReadTick = 5 * time.Millisecond
	if got := b.flushAt(base.Add(3 * time.Millisecond)).Sub(base); got != 5*time.Millisecond {
		t.Errorf("with a 5ms read tick, a window opened 3ms past a grid instant flushes %v past it, want 5ms (the tick)", got)
	}
}

// TestAClockOffsetMovesTheSyncersClockAndItsGrid: a syncer that stands in for a
// replica on another node (Options.ClockOffset) starts, and flushes its windows,
// by that node's clock: at a grid instant of this machine's, its window of 10ms
// opened 4ms past one of its own and waits 6ms. Its deadlines stay on this
// machine's clock (a connection's deadline an offset early would expire at once).
func TestAClockOffsetMovesTheSyncersClockAndItsGrid(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	for _, offset := range []time.Duration{0, 4 * time.Millisecond, -3 * time.Millisecond} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		s, err := New(Options{Self: peers.Self{Namespace: "ns", Name: "self"}, Peers: peers.NewMemoryPeerStore(), Listener: l,
			Instance: fmt.Sprintf("offset-%v", offset), ClockOffset: offset, now: func() time.Time { return base }})
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(0, int64(s.hello.Start)).Sub(base); got != offset {
			t.Errorf("offset %v: the start time is %v past this machine's clock, want the offset", offset, got)
		}
		if !s.o.now().Equal(base) {
			t.Errorf("offset %v: the syncer's deadlines read %v, want this machine's clock", offset, s.o.now())
		}
		b, err := s.Broadcast("index", BroadcastOptions{Window: 10 * time.Millisecond, Receive: func(string, []byte) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		want := 10*time.Millisecond - (offset+10*time.Millisecond)%(10*time.Millisecond)
		if got := b.untilFlush(); got != want {
			t.Errorf("offset %v: a window opened at a grid instant of this machine's flushes after %v, want %v", offset, got, want)
		}
	}
}

// TestConnectedIsCalledOncePerPairOfConnections: the two sides of a peer's
// connections come up in goroutines of their own, in any order and at once; a
// broadcast's consumer hears that the peer is connected both ways exactly once
// for each pair of connections, never before both are up (a consumer that opens
// a repair on each call would open it twice, or never).
func TestConnectedIsCalledOncePerPairOfConnections(t *testing.T) {
	s, _ := benchSyncer(t, 1, 0) // ns/epp-0, connected to this replica
	var calls sync.Map
	var wg sync.WaitGroup
	if _, err := s.Broadcast("index", BroadcastOptions{Receive: func(string, []byte) error { return nil }, Connected: func(peer string) {
		defer wg.Done()
		v, _ := calls.LoadOrStore(peer, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		v, ok := calls.Load("ns/epp-0")
		if !ok {
			return 0
		}
		return int(v.(*atomic.Int64).Load())
	}
	s.mu.Lock()
	rec := s.peers["ns/epp-0"]
	rec.out = &outStream{}
	s.mu.Unlock()
	bothSidesAtOnce := func() {
		var sides sync.WaitGroup
		for range 8 {
			sides.Add(1)
			go func() { defer sides.Done(); s.connectedBothWays("ns/epp-0") }()
		}
		sides.Wait()
	}

	c := &outConn{}
	rec.out.conn.Store(c)
	bothSidesAtOnce() // this replica's connection does not take broadcasts yet
	if n := count(); n != 0 {
		t.Fatalf("Connected called %d times before this replica's connection took broadcasts", n)
	}
	wg.Add(1)
	c.broadcasts.Store(true)
	bothSidesAtOnce()
	wg.Wait()
	if n := count(); n != 1 {
		t.Fatalf("Connected called %d times for one pair of connections, want 1", n)
	}

	// The peer's connection is replaced (a reconnect): a new pair, heard of once.
	wg.Add(1)
	s.mu.Lock()
	rec.in = &inStream{rec: rec}
	s.mu.Unlock()
	bothSidesAtOnce()
	wg.Wait()
	if n := count(); n != 2 {
		t.Fatalf("Connected called %d times after the peer's connection was replaced, want 2", n)
	}

	// This replica's own connection is replaced too.
	wg.Add(1)
	c2 := &outConn{}
	c2.broadcasts.Store(true)
	rec.out.conn.Store(c2)
	bothSidesAtOnce()
	wg.Wait()
	if n := count(); n != 3 {
		t.Fatalf("Connected called %d times after this replica's connection was replaced, want 3", n)
	}

	// Without the peer's connection, nothing.
	s.mu.Lock()
	rec.in = nil
	s.mu.Unlock()
	bothSidesAtOnce()
	time.Sleep(20 * time.Millisecond)
	if n := count(); n != 3 {
		t.Fatalf("Connected called with no connection from the peer (%d calls)", n)
	}
}
