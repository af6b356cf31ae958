package peersync

import (
	"fmt"
	"sync"
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
	set    map[string]bool // every message, once
}

func newKinds() *kinds { return &kinds{byKind: map[MessageKind]int{}, set: map[string]bool{}} }

func (k *kinds) receive(m Message) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byKind[m.Kind]++
	k.set[string(m.Data)] = true
	return nil
}

func (k *kinds) has(msgs []string) (missing int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range msgs {
		if !k.set[m] {
			missing++
		}
	}
	return missing
}

func (k *kinds) of(kind MessageKind) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byKind[kind]
}

// gapCluster is 3 replicas of a broadcast "index"; the first one's dialing follows
// the view it returns (setListed(false) cuts its connections to its peers, as a
// replica its discovery stops listing, and keeps it from dialing again).
func gapCluster(t *testing.T, opts BroadcastOptions) ([]*replica, []*Broadcast, []*kinds, *view) {
	t.Helper()
	v := &view{changed: make(chan struct{}), listed: true}
	a := startReplica(t, "epp-a", func(o *Options) { o.SelfListed = v.selfListed })
	rs := append([]*replica{a}, newCluster(t, 2)...)
	for _, r := range rs[1:] {
		listEachOther(a, []*replica{r})
	}
	var bs []*Broadcast
	var ks []*kinds
	for _, r := range rs {
		k := newKinds()
		o := opts
		o.ReceiveMessage = k.receive
		b, err := r.s.Broadcast("index", o)
		if err != nil {
			t.Fatal(err)
		}
		bs, ks = append(bs, b), append(ks, k)
	}
	waitForBroadcastConns(t, rs)
	return rs, bs, ks, v
}

// published publishes n messages named prefix-i on b, a window apart every 50 (so
// that they take several frames), and returns them.
func published(b *Broadcast, prefix string, n int) []string {
	var out []string
	for i := range n {
		m := fmt.Sprintf("%s-%d", prefix, i)
		b.Publish([]byte(m))
		out = append(out, m)
		if i%50 == 49 {
			time.Sleep(2 * b.o.Window)
		}
	}
	return out
}

func waitAll(t *testing.T, within time.Duration, k *kinds, msgs []string, who string) {
	t.Helper()
	wait.For(t, within, func() string {
		if n := k.has(msgs); n > 0 {
			return fmt.Sprintf("%s misses %d of %d messages", who, n, len(msgs))
		}
		return ""
	})
}

// TestNothingPublishedIsLostToAGap: a replica whose connections to its peers are
// cut for longer than the TTL goes on publishing; once it connects again, its peers
// learn from the cursor what they missed, ask for it, and get every message,
// resent (counted per peer); nothing stays missing. Before, what a peer missed
// during a gap was lost for good.
func TestNothingPublishedIsLostToAGap(t *testing.T) {
	rs, bs, ks, v := gapCluster(t, BroadcastOptions{})
	before := published(bs[0], "before", 100)
	for i := 1; i < 3; i++ {
		waitAll(t, 5*time.Second, ks[i], before, rs[i].name)
	}
	v.setListed(false)
	wait.Until(t, 5*time.Second, "epp-a's connections to end", func() bool {
		rs[0].s.mu.Lock()
		defer rs[0].s.mu.Unlock()
		for _, o := range rs[0].s.outStreams() {
			if o.conn.Load() != nil {
				return false
			}
		}
		return true
	})
	during := published(bs[0], "during", 400)
	time.Sleep(2 * rs[0].s.TTL()) // a gap longer than the TTL
	v.setListed(true)
	for i := 1; i < 3; i++ {
		waitAll(t, 10*time.Second, ks[i], during, rs[i].name)
		if ks[i].of(Resent) == 0 {
			t.Errorf("%s got no resent message: %v", rs[i].name, ks[i].byKind)
		}
	}
	after := published(bs[0], "after", 50)
	for i := 1; i < 3; i++ {
		waitAll(t, 5*time.Second, ks[i], after, rs[i].name)
		doc := rs[i].s.Document("-", "")
		st := doc.Broadcasts[0]
		var fromA BroadcastPeerStatus
		for _, p := range st.Peers {
			if p.Peer == "ns/epp-a" {
				fromA = p
			}
		}
		if st.Missing != 0 || fromA.Gaps == 0 || fromA.Missing != 0 {
			t.Errorf("%s: %d frames missing, epp-a's %+v; want gaps found and none missing", rs[i].name, st.Missing, fromA)
		}
	}
	a := rs[0].s.Document("-", "").Broadcasts[0]
	for _, p := range a.Peers {
		if p.Skipped == 0 || p.Resent == 0 || p.Delivered == 0 {
			t.Errorf("epp-a to %s: %+v, want frames skipped during the gap, resent after it, and delivered", p.Peer, p)
		}
	}
	if got := testutil.ToFloat64(broadcastMissing.WithLabelValues(rs[1].instance, "index")); got != 0 {
		t.Errorf("epp_peer_sync_broadcast_missing_frames = %v after the gap was filled", got)
	}
}

// TestAGapLongerThanTheBufferGetsAResync: a publisher that no longer keeps the
// frames a peer missed (ResendBytes) sends its snapshot instead, as a resync: the
// peer ends with everything the publisher holds, and counts one resync.
func TestAGapLongerThanTheBufferGetsAResync(t *testing.T) {
	var mu sync.Mutex
	var held []string // what epp-a holds: its snapshot
	rs, bs, ks, v := gapCluster(t, BroadcastOptions{ResendBytes: 512, Snapshot: func(emit func([]byte) bool) {
		mu.Lock()
		all := append([]string(nil), held...)
		mu.Unlock()
		for _, m := range all {
			if !emit([]byte(m)) {
				return
			}
		}
	}})
	publish := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			m := fmt.Sprintf("%s-%d", prefix, i)
			mu.Lock()
			held = append(held, m)
			mu.Unlock()
			bs[0].Publish([]byte(m))
			out = append(out, m)
			if i%50 == 49 {
				time.Sleep(2 * bs[0].o.Window)
			}
		}
		return out
	}
	v.setListed(false)
	wait.Until(t, 5*time.Second, "epp-a's connections to end", func() bool {
		rs[0].s.mu.Lock()
		defer rs[0].s.mu.Unlock()
		for _, o := range rs[0].s.outStreams() {
			if o.conn.Load() != nil {
				return false
			}
		}
		return true
	})
	during := publish("during", 500) // far more than 512 bytes of frames
	v.setListed(true)
	for i := 1; i < 3; i++ {
		waitAll(t, 10*time.Second, ks[i], during, rs[i].name)
		if ks[i].of(Resync) == 0 {
			t.Errorf("%s got no resync: %v", rs[i].name, ks[i].byKind)
		}
		wait.For(t, 5*time.Second, func() string {
			st := rs[i].s.Document("-", "").Broadcasts[0]
			for _, p := range st.Peers {
				if p.Peer == "ns/epp-a" && (p.ResyncsReceived < 1 || p.Missing != 0) {
					return fmt.Sprintf("%s: %+v, want a resync received and nothing missing", rs[i].name, p)
				}
			}
			return ""
		})
	}
}

// TestAPeerThatStartsGetsWhatWasPublishedBeforeItConnected: the first replicas of
// a fleet start together, cold, and warm empty; what one published before another
// connected reaches it (asked for from the start), and a replica that warmed from
// a snapshot is not sent the past again.
func TestAPeerThatStartsGetsWhatWasPublishedBeforeItConnected(t *testing.T) {
	a := startReplica(t, "epp-a")
	ka := newKinds()
	ba, err := a.s.Broadcast("index", BroadcastOptions{ReceiveMessage: ka.receive, Bootstrap: true, SnapshotTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A peer listed that does not answer: epp-a gets warm, empty, after the timeout.
	a.listFake("ghost")
	select {
	case <-ba.Warm():
	case <-time.After(5 * time.Second):
		t.Fatal("a replica whose only peer does not answer stays cold")
	}
	early := published(ba, "early", 120)
	b := startReplica(t, "epp-b")
	kb := newKinds()
	if _, err := b.s.Broadcast("index", BroadcastOptions{ReceiveMessage: kb.receive, Bootstrap: true}); err != nil {
		t.Fatal(err)
	}
	listEachOther(b, []*replica{a})
	waitAll(t, 10*time.Second, kb, early, "epp-b")
	if kb.of(Snapshot) == 0 && kb.of(Resent) == 0 {
		t.Errorf("epp-b got what was published before it by neither a snapshot nor a resend: %v", kb.byKind)
	}
}

// TestBootstrapAsksTheLongestRunningWarmPeer: in a surge, a replica that starts
// beside another new one does not warm from it: a cold peer declines (it would
// give a partial index) and the replica asks the next, a warm one; of the warm
// peers, the longest-running is asked first.
func TestBootstrapAsksTheLongestRunningWarmPeer(t *testing.T) {
	snapshot := func(name string, n int) func(func([]byte) bool) {
		return func(emit func([]byte) bool) {
			for i := range n {
				if !emit([]byte(fmt.Sprintf("%s-%d", name, i))) {
					return
				}
			}
		}
	}
	// cold started first, but waits for a peer that never answers.
	cold := startReplica(t, "cold")
	cb, err := cold.s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive, Bootstrap: true, SnapshotTimeout: time.Minute, Snapshot: snapshot("cold", 10)})
	if err != nil {
		t.Fatal(err)
	}
	cold.listFake("ghost")
	old := startReplica(t, "old")
	if _, err := old.s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive, Snapshot: snapshot("old", 1000)}); err != nil {
		t.Fatal(err)
	}
	young := startReplica(t, "young")
	if _, err := young.s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive, Snapshot: snapshot("young", 1000)}); err != nil {
		t.Fatal(err)
	}
	box := newKinds()
	late := startReplica(t, "late")
	lb, err := late.s.Broadcast("index", BroadcastOptions{ReceiveMessage: box.receive, Bootstrap: true})
	if err != nil {
		t.Fatal(err)
	}
	listEachOther(late, []*replica{young, cold, old})
	select {
	case <-lb.Warm():
	case <-time.After(10 * time.Second):
		t.Fatal("the new replica did not get warm")
	}
	st := late.s.Document("-", "").Broadcasts[0]
	if st.WarmFrom != "ns/old" || st.WarmEmpty {
		t.Errorf("warm from %q (empty %v), want the longest-running warm peer ns/old", st.WarmFrom, st.WarmEmpty)
	}
	if _, declined := lb.declined.Load("ns/cold"); !declined {
		t.Error("the cold peer, the longest-running, was not asked first or did not decline")
	}
	if n := box.has([]string{"cold-0"}); n == 0 {
		t.Error("the new replica took the cold peer's partial snapshot")
	}
	select {
	case <-cb.Warm():
		t.Error("the cold replica got warm from a peer that never answered within its minute")
	default:
	}
}

// TestASlowPeerDoesNotDelayTheOthers: a peer that reads slowly (and is being sent
// a snapshot) gets its frames from its own queue: every other peer still gets each
// published message within the window and a write, far within the TTL. Before,
// a publish wrote to the peers one after another, each write allowed a quarter of
// the interval, a snapshot's frame a second.
func TestASlowPeerDoesNotDelayTheOthers(t *testing.T) {
	rs := newCluster(t, 3, func(o *Options) { o.Interval = 50 * time.Millisecond; o.TTL = 150 * time.Millisecond })
	fast := newInbox()
	var slowed sync.Once
	release := make(chan struct{})
	slow := func(peer string, msg []byte) error {
		if len(msg) > 1000 {
			slowed.Do(func() {})
			select { // stuck on a large message until the test ends
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}
		return nil
	}
	t.Cleanup(func() { close(release) })
	big := make([]byte, 60<<10)
	a, err := rs[0].s.Broadcast("index", BroadcastOptions{Receive: newInbox().receive, Snapshot: func(emit func([]byte) bool) {
		for i := range 200 {
			big[0] = byte(i)
			if !emit(big) {
				return
			}
		}
	}})
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
	for i := range 100 {
		m := append([]byte(nil), big...)
		m[1] = byte(i)
		a.Publish(m)
	}
	wait.Until(t, 10*time.Second, "the fast peer to read the large messages", func() bool { return fast.count() == 100 })
	var lat []time.Duration
	for i := range 100 {
		msg := fmt.Sprintf("m-%d", i)
		sent := time.Now()
		a.Publish([]byte(msg))
		wait.Until(t, 2*time.Second, msg+" to reach the fast peer", func() bool { _, ok := fast.has(msg); return ok })
		at, _ := fast.has(msg)
		lat = append(lat, at.Sub(sent))
		if i == 10 {
			// And a snapshot to the slow peer, on its own queue.
			rs[0].s.mu.Lock()
			o := rs[0].s.peers["ns/epp-2"].out
			rs[0].s.mu.Unlock()
			if c := o.conn.Load(); c != nil {
				go a.writeSnapshot(o, c, wire.BroadcastSnapshot, 0)
			}
		}
	}
	p99 := stats.Percentile(lat, 0.99)
	t.Logf("to the fast peer while another is stalled: p50 %v, p99 %v (TTL %v)", stats.Percentile(lat, 0.5), p99, rs[1].s.TTL())
	if p99 > rs[1].s.TTL() {
		t.Errorf("p99 %v from Publish to the fast peer, want within its TTL (%v): the slow peer delays it", p99, rs[1].s.TTL())
	}
	if n := testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeTTL)); n != 0 {
		t.Errorf("the fast peer expired %v of epp-0's values as silent", n)
	}
}

// TestHostileBroadcastFramesAreRefused: snapshot and resync frames from a peer
// this replica did not ask, a cursor with messages, and a frame of empty messages
// are counted and never reach the consumer: a peer could otherwise pass anything
// off as a snapshot (a consumer trusts a snapshot further than a live message),
// and a 4 MiB frame of empty messages cost 2.8 s of CPU and 1 GiB before.
func TestHostileBroadcastFramesAreRefused(t *testing.T) {
	rs := newCluster(t, 1)
	k := newKinds()
	if _, err := rs[0].s.Broadcast("index", BroadcastOptions{ReceiveMessage: k.receive}); err != nil {
		t.Fatal(err)
	}
	rs[0].listFake("mallory")
	c := rawPeer(t, rs[0], "mallory", time.Now())
	msgs := [][]byte{[]byte("claimed")}
	before := rs[0].rejected(RejectUnsolicited)
	for _, f := range [][]byte{
		wire.AppendBroadcast(nil, wire.BroadcastSnapshot, "index", msgs),
		wire.AppendBroadcast(nil, wire.BroadcastSnapshot|wire.BroadcastSnapshotEnd, "index", msgs),
		wire.AppendBroadcastSeq(nil, wire.BroadcastSnapshot|wire.BroadcastResync|wire.BroadcastSnapshotEnd|wire.BroadcastSequenced, "index", 7, msgs),
	} {
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, 2*time.Second, "three unsolicited frames counted", func() bool { return rs[0].rejected(RejectUnsolicited)-before == 3 })
	if n := k.has([]string{"claimed"}); n == 0 {
		t.Error("an unsolicited snapshot reached the consumer")
	}
	for name, f := range map[string][]byte{
		"a cursor with messages": wire.AppendBroadcastSeq(nil, wire.BroadcastSequenced|wire.BroadcastCursor, "index", 3, msgs),
		"empty messages":         wire.AppendBroadcast(nil, 0, "index", make([][]byte, 100_000)),
	} {
		c := rawPeer(t, rs[0], "mallory", time.Now())
		malformed := rs[0].rejected(RejectMalformed)
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
		if !closedBy(c, 2*time.Second) {
			t.Errorf("%s did not close the connection", name)
		}
		rs[0].waitRejected(t, time.Second, RejectMalformed, malformed, name)
	}
	if n := k.of(Live) + k.of(Snapshot) + k.of(Resync); n != 0 {
		t.Errorf("%d hostile messages reached the consumer", n)
	}
}

// TestAResendRequestIsBounded: a peer that asks for frames far beyond what was
// published gets those there are, which it does not take twice; one that asks
// another process of this replica gets nothing; the connections go on.
func TestAResendRequestIsBounded(t *testing.T) {
	rs := newCluster(t, 2)
	ks := make([]*kinds, 2)
	bs := make([]*Broadcast, 2)
	for i, r := range rs {
		ks[i] = newKinds()
		b, err := r.s.Broadcast("index", BroadcastOptions{ReceiveMessage: ks[i].receive, ResendBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	waitForBroadcastConns(t, rs)
	first := published(bs[0], "m", 10)
	waitAll(t, 5*time.Second, ks[1], first, rs[1].name)
	// epp-1 asks epp-0 for everything up to 2^62, and for frames of another process.
	rs[1].s.mu.Lock()
	o := rs[1].s.peers["ns/epp-0"].out
	rs[1].s.mu.Unlock()
	oc := o.conn.Load()
	for _, r := range []wire.Resend{
		{Name: "index", Incarnation: rs[0].s.hello.Nonce, Ranges: []wire.SeqRange{{From: 1, To: 1 << 62}}},
		{Name: "index", Incarnation: rs[0].s.hello.Nonce + 1, Ranges: []wire.SeqRange{{From: 1, To: 2}}},
	} {
		o.send(oc, wire.AppendResend(nil, r))
	}
	wait.Until(t, 5*time.Second, "epp-0 to resend what it has", func() bool {
		st := rs[0].s.Document("-", "").Broadcasts[0]
		return len(st.Peers) == 1 && st.Peers[0].Resent > 0
	})
	next := published(bs[0], "n", 10)
	waitAll(t, 5*time.Second, ks[1], next, rs[1].name)
	if got := ks[1].of(Live) + ks[1].of(Resent); got != 20 {
		t.Errorf("epp-1 took %d messages, want the 20 published once each (resent duplicates are not taken)", got)
	}
}
