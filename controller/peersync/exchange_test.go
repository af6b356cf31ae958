package peersync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// kinds records what a replica's broadcast received, with how it came.
type kinds struct {
	mu     sync.Mutex
	byKind map[MessageKind]int
	from   map[string]string // message -> peer
}

func newKinds() *kinds { return &kinds{byKind: map[MessageKind]int{}, from: map[string]string{}} }

func (k *kinds) receive(m Message) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byKind[m.Kind]++
	k.from[string(m.Data)] = m.Peer
	return nil
}

func (k *kinds) of(kind MessageKind) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byKind[kind]
}

func (k *kinds) sender(msg string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.from[msg]
	return p, ok
}

// TestSendToReachesOnePeerAlone: a message sent to one peer reaches that peer's
// receiver alone, as Direct, from its sender, and counts in the direct bytes of
// both; one to a peer this replica has no connection to fails at once; Connected
// is called for each peer whose connection comes up, and again when a connection
// that was closed comes back.
func TestSendToReachesOnePeerAlone(t *testing.T) {
	rs := newCluster(t, 3)
	ks := make([]*kinds, 3)
	bs := make([]*Broadcast, 3)
	var connected sync.Map // "from->to" -> times
	for i, r := range rs {
		ks[i] = newKinds()
		b, err := r.s.Broadcast("index", BroadcastOptions{ReceiveMessage: ks[i].receive, Connected: func(peer string) {
			v, _ := connected.LoadOrStore(r.name+"->"+peer, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	waitForBroadcastConns(t, rs)
	times := func(key string) int64 {
		v, ok := connected.Load(key)
		if !ok {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	wait.Until(t, 2*time.Second, "Connected for every peer", func() bool {
		return times("epp-0->ns/epp-1") == 1 && times("epp-0->ns/epp-2") == 1 && times("epp-1->ns/epp-0") == 1
	})
	ctx := context.Background()
	if err := bs[0].SendTo(ctx, "ns/epp-1", []byte("to one alone")); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 2*time.Second, "the message to arrive", func() bool { _, ok := ks[1].sender("to one alone"); return ok })
	if from, _ := ks[1].sender("to one alone"); from != "ns/epp-0" || ks[1].of(Direct) != 1 || ks[1].of(Live) != 0 {
		t.Errorf("epp-1 got it from %q, %d direct and %d live, want one direct from ns/epp-0", from, ks[1].of(Direct), ks[1].of(Live))
	}
	if ks[2].of(Direct)+ks[2].of(Live) != 0 {
		t.Error("a message to epp-1 alone reached epp-2")
	}
	if err := bs[0].SendTo(ctx, "ns/nobody", []byte("lost")); !errors.Is(err, ErrNotConnected) {
		t.Errorf("SendTo a peer that is not a member: %v, want ErrNotConnected", err)
	}
	doc := rs[0].s.Document("-", "").Broadcasts[0]
	for _, p := range doc.Peers {
		if (p.Peer == "ns/epp-1") != (p.DirectBytesSent > 0) {
			t.Errorf("epp-0's direct bytes sent to %s: %v", p.Peer, p.DirectBytesSent)
		}
	}
	// epp-1 drops epp-0's connection: epp-0 connects again, and hears of it.
	rs[1].s.mu.Lock()
	rs[1].s.peers["ns/epp-0"].in.conn.Close()
	rs[1].s.mu.Unlock()
	wait.Until(t, 5*time.Second, "Connected again after the connection came back", func() bool { return times("epp-0->ns/epp-1") == 2 })
}

// TestASlowPeerDoesNotDelayTheOthers: a peer that reads slowly gets its frames from
// its own queue: every other peer still gets each published message within the
// window and a write, far within the TTL, and the slow one's frames that do not
// fit its queue are skipped and counted. Before, a publish wrote to the peers one
// after another, each write allowed a quarter of the interval.
func TestASlowPeerDoesNotDelayTheOthers(t *testing.T) {
	rs := newCluster(t, 3, func(o *Options) { o.Interval = 50 * time.Millisecond; o.TTL = 150 * time.Millisecond })
	fast := newInbox()
	release := make(chan struct{})
	slow := func(peer string, msg []byte) error {
		if len(msg) > 1000 {
			select { // stuck on a large message until the test ends
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}
		return nil
	}
	t.Cleanup(func() { close(release) })
	big := make([]byte, 60<<10)
	a, err := rs[0].s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs[1].s.Broadcast("index", BroadcastOptions{Receive: fast.receive}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs[2].s.Broadcast("index", BroadcastOptions{Receive: slow}); err != nil {
		t.Fatal(err)
	}
	waitForBroadcastConns(t, rs)
	// The slow peer stops reading on the first large message, with megabytes on
	// their way to it: its socket fills, then its queue. The fast peer reads them.
	for round := range 4 {
		for i := range 50 {
			m := append([]byte(nil), big...)
			m[1], m[2] = byte(i), byte(round)
			a.Publish(m)
		}
		wait.Until(t, 10*time.Second, "the fast peer to read the large messages", func() bool { return fast.count() == 50*(round+1) })
	}
	var lat []time.Duration
	for i := range 100 {
		msg := fmt.Sprintf("msg-%d", i)
		sent := time.Now()
		a.Publish([]byte(msg))
		wait.Until(t, 2*time.Second, msg+" to reach the fast peer", func() bool { _, ok := fast.has(msg); return ok })
		at, _ := fast.has(msg)
		lat = append(lat, at.Sub(sent))
	}
	p99 := stats.Percentile(lat, 0.99)
	t.Logf("to the fast peer while another is stalled: p50 %v, p99 %v (TTL %v)", stats.Percentile(lat, 0.5), p99, rs[1].s.TTL())
	if p99 > rs[1].s.TTL() {
		t.Errorf("p99 %v from Publish to the fast peer, want within its TTL (%v): the slow peer delays it", p99, rs[1].s.TTL())
	}
	if n := testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeTTL)); n != 0 {
		t.Errorf("the fast peer expired %v of epp-0's values as silent", n)
	}
	if skipped := testutil.ToFloat64(broadcastPeerFrames.WithLabelValues(rs[0].instance, "index", "ns/epp-2", "skipped")); skipped == 0 {
		t.Error("no frame skipped for the stalled peer: its queue grew without bound")
	}
}

// TestAPeerOverItsBudgetIsCutOff: what a peer may cost a replica is one budget,
// charged at one place. A peer that floods published frames past it is cut off
// (its connection closed, counted as budget); and a peer whose requests would make
// the replica send more than the budget allows gets an answer only until the
// budget is spent: the replica's SendTo says ErrOverBudget, cuts it off, and what
// it sent in all stays within the budget's burst and rate, whatever it was asked.
// (A resend request of 37 KB made a replica send 4.2 GiB before.)
func TestAPeerOverItsBudgetIsCutOff(t *testing.T) {
	const rate, burst = 256 << 10, 1 << 20
	small := func(o *Options) {
		o.MaxMessageBytes = 256 << 10
		o.PeerBudget = PeerBudget{BytesPerSecond: rate, BurstBytes: burst}
	}
	rs := newCluster(t, 2, small)
	// epp-0 answers every request of epp-1's with 32 KiB: 2,000 times what it is asked with.
	answer := make([]byte, 32<<10)
	var sent, refused atomic.Int64
	var a *Broadcast
	a, err := rs[0].s.Broadcast("index", BroadcastOptions{ReceiveMessage: func(m Message) error {
		if m.Kind != Direct {
			return nil
		}
		go func() {
			err := a.SendTo(context.Background(), m.Peer, answer)
			switch {
			case err == nil:
				sent.Add(int64(len(answer)))
			case errors.Is(err, ErrOverBudget):
				refused.Add(1)
			}
		}()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rs[1].s.Broadcast("index", BroadcastOptions{ReceiveMessage: newKinds().receive})
	if err != nil {
		t.Fatal(err)
	}
	waitForBroadcastConns(t, rs)
	before := rs[0].rejected(RejectBudget)
	start := time.Now()
	for i := 0; time.Since(start) < 2*time.Second; i++ {
		_ = b.SendTo(context.Background(), "ns/epp-0", []byte(fmt.Sprintf("ask-%06d", i)))
		if i%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	took := time.Since(start)
	wait.Until(t, 2*time.Second, "the asker cut off", func() bool { return rs[0].rejected(RejectBudget) > before && refused.Load() > 0 })
	bound := float64(burst) + rate*took.Seconds() + float64(len(answer))
	t.Logf("in %v, epp-0 answered %d KiB (bound %.0f KiB) and refused %d answers over the budget", took.Round(time.Millisecond), sent.Load()>>10, bound/1024, refused.Load())
	if float64(sent.Load()) > bound {
		t.Errorf("epp-0 sent %d bytes in answer, over its budget for the peer (%.0f)", sent.Load(), bound)
	}

	// A raw peer that floods published frames is cut off once over its budget.
	rs[0].listFake("mallory")
	c := rawPeer(t, rs[0], "mallory", time.Now())
	flood := wire.AppendBroadcast(nil, 0, "index", [][]byte{make([]byte, 60<<10)})
	before = rs[0].rejected(RejectBudget)
	for range 2 * burst / len(flood) {
		if _, err := c.Write(flood); err != nil {
			break // closed
		}
	}
	rs[0].waitRejected(t, 2*time.Second, RejectBudget, before, "a flood past the budget")
	if !closedBy(c, 2*time.Second) {
		t.Error("the flooding peer's connection stayed open")
	}
}

// TestHostileBroadcastFramesAreRefused: a frame of tiny messages, one with flags
// this version does not know (the log version's snapshot, say), and a message the
// receiver refuses each close the connection, counted, and nothing of theirs
// reaches the consumer: a 4 MiB frame of 1-byte messages cost 1.1 s of CPU and
// 488 MiB before, and the connection stayed open.
func TestHostileBroadcastFramesAreRefused(t *testing.T) {
	rs := newCluster(t, 1)
	k := newKinds()
	if _, err := rs[0].s.Broadcast("index", BroadcastOptions{ReceiveMessage: func(m Message) error {
		if string(m.Data) == "refuse" {
			return &RejectError{Reason: RejectUnknownBroadcast, Err: errors.New("the consumer refuses it")}
		}
		return k.receive(m)
	}}); err != nil {
		t.Fatal(err)
	}
	rs[0].listFake("mallory")
	tiny := make([][]byte, 1<<20)
	for i := range tiny {
		tiny[i] = []byte{1}
	}
	for name, c := range map[string]struct {
		frame  []byte
		reason string
	}{
		"a frame of 1-byte messages":     {wire.AppendBroadcast(nil, 0, "index", tiny), RejectMalformed},
		"the log version's snapshot":     {wire.AppendBroadcast(nil, 1|2, "index", [][]byte{[]byte("claimed")}), RejectMalformed},
		"a message the consumer refuses": {wire.AppendBroadcast(nil, 0, "index", [][]byte{[]byte("refuse")}), RejectUnknownBroadcast},
	} {
		conn := rawPeer(t, rs[0], "mallory", time.Now())
		before := rs[0].rejected(c.reason)
		if _, err := conn.Write(c.frame); err != nil {
			t.Fatal(err)
		}
		if !closedBy(conn, 5*time.Second) {
			t.Errorf("%s did not close the connection", name)
		}
		rs[0].waitRejected(t, time.Second, c.reason, before, name)
	}
	if n := k.of(Live) + k.of(Direct); n != 0 {
		t.Errorf("%d hostile messages reached the consumer", n)
	}
}
