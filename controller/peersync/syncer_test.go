package peersync

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

const testInterval = 20 * time.Millisecond

// testReadTick is the ReadTick of every replica a test starts: 0, but for
// TestReadTickKeepsEveryPromise's run of the other tests.
var testReadTick time.Duration

// replica is one syncer on 127.0.0.1 with a membership of its own.
type replica struct {
	name     string
	port     int32
	members  *peers.MemoryPeerStore
	s        *Syncer
	cancel   context.CancelFunc
	done     chan error
	instance string
	t        *testing.T
}

type clusterOption func(*Options)

// newCluster starts n replicas that list each other.
func newCluster(t *testing.T, n int, opts ...clusterOption) []*replica {
	t.Helper()
	var rs []*replica
	for i := range n {
		rs = append(rs, startReplica(t, fmt.Sprintf("epp-%d", i), opts...))
	}
	for _, r := range rs {
		for _, o := range rs {
			if o != r {
				r.members.UpsertPeer(o.meta())
			}
		}
	}
	return rs
}

var instances sync.Map

func startReplica(t *testing.T, name string, opts ...clusterOption) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	instance := t.Name() + "/" + name
	for i := 0; ; i++ { // a fresh metrics label per syncer, even across -count runs
		if _, loaded := instances.LoadOrStore(instance, true); !loaded {
			break
		}
		instance = fmt.Sprintf("%s/%s#%d", t.Name(), name, i)
	}
	r := &replica{name: name, port: int32(l.Addr().(*net.TCPAddr).Port), members: peers.NewMemoryPeerStore(), done: make(chan error, 1), instance: instance, t: t}
	// A TTL of 25 intervals: a loaded machine (the race detector, TLS) must not
	// expire a peer that is only slow; the tests of the TTL set their own.
	o := Options{Self: peers.Self{Namespace: "ns", Name: name}, Peers: r.members, Listener: l, Interval: testInterval, TTL: 25 * testInterval, Instance: instance, Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1}).WithValues("replica", name)}
	o.ReadTick = testReadTick
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil {
		r.t.Errorf("%s: Run: %v", r.name, err)
	}
	r.cancel = nil
}

func (r *replica) meta() peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: "ns", Name: r.name, Address: "127.0.0.1", Port: r.port, Ready: true, Serving: true}
}

func sum(values []any) any {
	total := &load{}
	for _, v := range values {
		if l, ok := v.(*load); ok {
			total.Requests += l.Requests
			total.Tokens += l.Tokens
		}
	}
	return total
}

// requests is what r's Get says of (key, endpoint), -1 for a miss.
func (r *replica) requests(key, endpoint string) int64 {
	v, ok := r.s.Get(key, endpoint, sum)
	if !ok {
		return -1
	}
	return v.(*load).Requests
}

func waitSum(t *testing.T, within time.Duration, rs []*replica, key, endpoint string, want int64) time.Duration {
	t.Helper()
	return wait.For(t, within, func() string {
		var got []string
		all := true
		for _, r := range rs {
			n := r.requests(key, endpoint)
			all = all && n == want
			got = append(got, r.name+"="+strconv.FormatInt(n, 10))
		}
		if all {
			return ""
		}
		return fmt.Sprintf("%s %s: want %d on every replica, got %s", key, endpoint, want, strings.Join(got, " "))
	})
}

func TestValuesReachEveryReplicaAndSum(t *testing.T) {
	rs := newCluster(t, 3)
	const key, ep = "inflight:p", "ns/vllm-0"
	for i, r := range rs {
		if err := r.s.Set(key, ep, &load{Requests: int64(i + 1), Tokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	took := waitSum(t, 2*time.Second, rs, key, ep, 6)
	t.Logf("1+2+3 on every replica after %v (interval %v)", took, testInterval)
	v, _ := rs[1].s.Get(key, ep, sum)
	if v.(*load).Tokens != 30 {
		t.Fatalf("tokens: got %d, want 30", v.(*load).Tokens)
	}

	// A change shows within two intervals, measured.
	start := time.Now()
	if err := rs[0].s.Set(key, ep, &load{Requests: 11}); err != nil {
		t.Fatal(err)
	}
	waitSum(t, 2*time.Second, rs, key, ep, 16)
	// Within two intervals on an idle machine; the bound leaves room for a loaded one
	// and still fails a push that waits for anything but the next interval.
	if d := time.Since(start); d > 2*testInterval+time.Second {
		t.Errorf("a change took %v to reach every replica, want within 2 intervals (%v) plus scheduling", d, 2*testInterval)
	}

	// Delete on one replica removes its value everywhere.
	rs[2].s.Delete(key, ep)
	waitSum(t, 2*time.Second, rs[:2], key, ep, 13)
	if got := rs[2].requests(key, ep); got != -1 {
		// The others' values may come back to replica 2 with their next push (they still
		// set it): then it must not count its own deleted value.
		if got != 13 {
			t.Fatalf("replica 2 after its Delete: %d, want a miss or the others' 13", got)
		}
	}

	// Many endpoints, one message per peer per interval.
	for i := range 500 {
		for _, r := range rs {
			if err := r.s.Set(key, fmt.Sprintf("ns/m-%d", i), &load{Requests: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitSum(t, 5*time.Second, rs, key, "ns/m-499", 3)
	// Wait for 20 messages from replica 0 (ten intervals' worth to its 2 peers), then
	// check how long they took: at most one message per peer per interval, one more
	// for a tick at either end, however many endpoints changed (a loaded machine may
	// skip ticks, which only makes it slower).
	sentSince := func() func() float64 {
		before := testutil.ToFloat64(sentMessages.WithLabelValues(rs[0].instance))
		return func() float64 { return testutil.ToFloat64(sentMessages.WithLabelValues(rs[0].instance)) - before }
	}()
	start = time.Now()
	wait.For(t, 5*time.Second, func() string {
		if n := sentSince(); n < 2*10 {
			return fmt.Sprintf("replica 0 sent %v messages to its 2 peers, want 20", n)
		}
		return ""
	})
	sent, intervals := sentSince(), float64(time.Since(start)/testInterval)
	if sent > 2*(intervals+2) {
		t.Errorf("replica 0 sent %v messages to 2 peers in %v intervals, want at most one per peer per interval", sent, intervals)
	}
}

func TestPeerRemovedByDiscoveryStopsCountingAtOnce(t *testing.T) {
	// A TTL far longer than the wait below: only the removal can stop the value.
	rs := newCluster(t, 3, func(o *Options) { o.TTL = 10 * time.Second })
	const key, ep = "k", "ns/e"
	for _, r := range rs {
		if err := r.s.Set(key, ep, &load{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, key, ep, 3)
	// Replica 1 stops listing replica 0 (say its pod went away): from the next Get on,
	// replica 0's value no longer counts there, without waiting for any message.
	rs[1].members.DeletePeer("ns/" + rs[0].name)
	took := wait.For(t, time.Second, func() string {
		if rs[1].requests(key, ep) == 2 {
			return ""
		}
		return fmt.Sprintf("replica 1 still sums %d", rs[1].requests(key, ep))
	})
	if took > time.Second {
		t.Errorf("a removed peer's value counted %v after its removal, want at once (the TTL is 10 s)", took)
	}
	if got := testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeRemoved)); got != 1 {
		t.Errorf("values_expired_total{cause=removed} = %v, want 1", got)
	}
	// And replica 0 may no longer push to it: its connections are held until the
	// handshake timeout (discovery might list it again), then refused and counted.
	refused := func() float64 {
		return testutil.ToFloat64(rejections.WithLabelValues(rs[1].instance, RejectUnknownSource)) +
			testutil.ToFloat64(rejections.WithLabelValues(rs[1].instance, RejectIdentity))
	}
	wait.For(t, DefaultHandshakeTimeout+3*time.Second, func() string {
		if refused() > 0 {
			return ""
		}
		return "replica 1 counted no rejection of the removed peer's connections"
	})
	if got := rs[1].requests(key, ep); got != 2 {
		t.Fatalf("replica 0 counts again on replica 1 (%d) after being removed", got)
	}
}

func TestRestartedPeerIsNeverCountedTwice(t *testing.T) {
	rs := newCluster(t, 2)
	const key = "k"
	for _, ep := range []string{"ns/a", "ns/b"} {
		if err := rs[0].s.Set(key, ep, &load{Requests: 5}); err != nil {
			t.Fatal(err)
		}
		if err := rs[1].s.Set(key, ep, &load{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, key, "ns/b", 6)
	// Replica 0 restarts with the same name: a new process that sets only ns/a, 7.
	rs[0].stop()
	again := startReplica(t, rs[0].name, func(o *Options) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.Listener = l
	})
	again.members.UpsertPeer(rs[1].meta())
	rs[1].members.UpsertPeer(again.meta()) // its new address (port)
	if err := again.s.Set(key, "ns/a", &load{Requests: 7}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 2*time.Second, func() string {
		a, b := rs[1].requests(key, "ns/a"), rs[1].requests(key, "ns/b")
		if a == 5+7+1 || a > 8 {
			t.Fatalf("replica 1 counts the restarted peer's old and new values: ns/a = %d", a)
		}
		if a == 8 && b == 1 {
			return "" // the new run's 7 plus its own 1; the old run's ns/b gone
		}
		return fmt.Sprintf("replica 1: ns/a = %d (want 8), ns/b = %d (want 1)", a, b)
	})
}

func TestSilentPeerExpiresAfterTTLAndComesBack(t *testing.T) {
	rs := newCluster(t, 2, func(o *Options) { o.TTL = 500 * time.Millisecond })
	const key, ep = "k", "ns/e"
	for _, r := range rs {
		if err := r.s.Set(key, ep, &load{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, key, ep, 2)
	// Replica 0 keeps running but replica 1 hears nothing from it: its push loop is
	// stopped by cutting the membership it pushes to, while replica 1 still lists it.
	rs[0].members.DeletePeer("ns/" + rs[1].name)
	start := time.Now()
	took := wait.For(t, 2*time.Second, func() string {
		if rs[1].requests(key, ep) == 1 {
			return ""
		}
		return fmt.Sprintf("replica 1 still sums %d", rs[1].requests(key, ep))
	})
	ttl := rs[1].s.TTL()
	if took < ttl/2 || time.Since(start) > ttl+time.Second {
		t.Errorf("a silent peer stopped counting after %v, want at the TTL (%v)", took, ttl)
	}
	if got := testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeClosed)) + testutil.ToFloat64(expired.WithLabelValues(rs[1].instance, causeTTL)); got != 1 {
		t.Errorf("values_expired_total (ttl, closed) = %v, want 1", got)
	}
	rs[0].members.UpsertPeer(rs[1].meta())
	waitSum(t, 2*time.Second, rs, key, ep, 2)
}

func TestOnlyDiscoveredPeersMayPush(t *testing.T) {
	rs := newCluster(t, 2)
	stranger := startReplica(t, "stranger")
	stranger.members.UpsertPeer(rs[0].meta()) // it knows replica 0; replica 0 does not know it
	if err := stranger.s.Set("k", "ns/e", &load{Requests: 100}); err != nil {
		t.Fatal(err)
	}
	if err := rs[1].s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	if err := rs[0].s.Set("k", "ns/e", &load{}); err != nil {
		t.Fatal(err)
	}
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 1)
	wait.For(t, 2*time.Second, func() string {
		if testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, RejectIdentity)) > 0 {
			return ""
		}
		return "replica 0 did not reject the stranger (same address, another identity)"
	})
	time.Sleep(5 * testInterval)
	if got := rs[0].requests("k", "ns/e"); got != 1 {
		t.Fatalf("replica 0 counts %d: a replica outside its peer set pushed", got)
	}
}

func TestMalformedAndOversizedInputIsACountedRejection(t *testing.T) {
	rs := newCluster(t, 2, func(o *Options) { o.MaxMessageBytes = 4096; o.MaxValueBytes = 64 })
	if err := rs[1].s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	if err := rs[0].s.Set("k", "ns/e", &load{}); err != nil {
		t.Fatal(err)
	}
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 1)
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(rs[0].port)))
	h := wire.AppendHello(nil, wire.Hello{Version: wire.Version, Namespace: "ns", Name: rs[1].name, Start: uint64(time.Now().UnixNano())})
	send := func(payload []byte) {
		c, err := net.Dial("tcp", target)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(payload)
		buf := make([]byte, 256)
		for { // until replica 0 closes it
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}
	for name, c := range map[string]struct {
		payload []byte
		reason  string
	}{
		"not the protocol":  {[]byte("GET / HTTP/1.1\r\n\r\n"), RejectPreface},
		"garbage frame":     {append(append([]byte(wire.Preface), h...), 3, 0xff, 0xff, 0xff), RejectMalformed},
		"delta first":       {append(append([]byte(wire.Preface), h...), wire.AppendState(nil, &wire.State{Seq: 1})...), RejectMalformed},
		"oversized message": {append(append([]byte(wire.Preface), h...), 0xff, 0xff, 0x03), RejectOversized},
	} {
		before := testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, c.reason))
		send(c.payload)
		wait.For(t, 2*time.Second, func() string {
			if testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, c.reason)) > before {
				return ""
			}
			return name + ": not counted as " + c.reason
		})
	}
	// An oversized value in a well-formed message: that value is left out, counted.
	big := &wire.State{Full: true, Seq: 1,
		Keys:    []wire.KeyDef{{Index: 1, Name: "k2", Codec: wire.CodecFields, Fields: []wire.Field{{Name: "Requests", Kind: wire.KindInt}}}},
		Entries: []wire.EntryDef{{Index: 1, Key: 1, Endpoint: "ns/x"}, {Index: 2, Key: 1, Endpoint: "ns/y"}},
		Values:  []wire.ValueDef{{Entry: 1, Data: make([]byte, 100)}, {Entry: 2, Data: []byte{4}}}}
	before := testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, RejectValueTooLarge))
	go send(append(append([]byte(wire.Preface), h...), wire.AppendState(nil, big)...))
	wait.For(t, 2*time.Second, func() string {
		if testutil.ToFloat64(rejections.WithLabelValues(rs[0].instance, RejectValueTooLarge)) > before {
			return ""
		}
		return "an oversized value was not counted"
	})
	// And replica 0 is still serving: the genuine peer's value still counts.
	time.Sleep(5 * testInterval)
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 1)
}

func TestSetRefusesWhatCannotBeShared(t *testing.T) {
	rs := newCluster(t, 1)
	s := rs[0].s
	if err := s.Set("k", "ns/e", nil); err == nil {
		t.Error("Set took a nil value")
	}
	if err := s.Set("k", "ns/e", (*load)(nil)); err == nil {
		t.Error("Set took a nil pointer")
	}
	if err := s.Set("k", "ns/e", &load{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("k", "ns/e", &loadV2{}); err == nil || !strings.Contains(err.Error(), "type") {
		t.Errorf("a second type for one key: %v", err)
	}
	if _, err := New(Options{Self: peers.Self{Name: "x"}, Peers: peers.NewMemoryPeerStore(), Listener: rs[0].s.o.Listener, Interval: time.Millisecond}); err == nil {
		t.Error("an interval of 1ms was accepted")
	}
	if _, err := New(Options{Peers: peers.NewMemoryPeerStore(), Listener: rs[0].s.o.Listener}); err == nil {
		t.Error("a syncer without a name was accepted")
	}
}

// TestEndpointChurn: endpoints deleted and others set, over and over; every
// replica's sums stay right, and the indexes on the wire are reused, so what a peer
// holds per connection stays as large as the live endpoints.
func TestEndpointChurn(t *testing.T) {
	rs := newCluster(t, 2)
	const key = "k"
	live := map[string]bool{}
	next := 0
	for round := range 5 {
		for range 20 {
			ep := fmt.Sprintf("ns/e-%d", next)
			next++
			live[ep] = true
			for _, r := range rs {
				if err := r.s.Set(key, ep, &load{Requests: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
		n := 0
		for ep := range live {
			if n++; n > 10 {
				break
			}
			delete(live, ep)
			for _, r := range rs {
				r.s.Delete(key, ep)
			}
		}
		for ep := range live {
			waitSum(t, 2*time.Second, rs, key, ep, 2)
		}
		t.Logf("round %d: %d live endpoints", round, len(live))
	}
	time.Sleep(3 * testInterval)
	rs[0].s.mu.Lock()
	rec := rs[0].s.peers["ns/"+rs[1].name]
	width := len(rec.in.entries)
	rs[0].s.mu.Unlock()
	if width > len(live)+20+1 {
		t.Errorf("replica 0 holds %d entry slots for replica 1's %d live endpoints: indexes are not reused (replica 1 used %d, %d free)", width, len(live), rs[1].s.push.nextIndex, len(rs[1].s.push.free))
	}
}
