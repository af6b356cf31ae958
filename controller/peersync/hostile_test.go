package peersync

import (
	"bufio"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// The tests of this file speak the wire by hand, as a hostile or broken peer would.

// rejected is r's count of rejections for reason.
func (r *replica) rejected(reason string) float64 {
	return testutil.ToFloat64(rejections.WithLabelValues(r.instance, reason))
}

// waitRejected waits until r counted more than before rejections for reason.
func (r *replica) waitRejected(t *testing.T, within time.Duration, reason string, before float64, what string) {
	t.Helper()
	wait.For(t, within, func() string {
		if r.rejected(reason) > before {
			return ""
		}
		return what + ": not counted as " + reason
	})
}

// listFake makes r's discovery list a peer named name at 127.0.0.1 (nothing listens
// on its port: r's pushes to it fail, which is no matter here).
func (r *replica) listFake(name string) {
	r.members.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: name, Address: "127.0.0.1", Port: 1, Ready: true, Serving: true})
}

// dial connects to r.
func dial(t *testing.T, r *replica) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: time.Second}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawPeer is a connection to r that read r's banner and sent the preface and a hello
// as name (starting at start).
func rawPeer(t *testing.T, r *replica, name string, start time.Time) net.Conn {
	t.Helper()
	c := dial(t, r)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("no banner: %v", err)
	}
	h := wire.AppendHello([]byte(wire.Preface), wire.Hello{Version: wire.Version, Namespace: "ns", Name: name, Start: uint64(start.UnixNano())})
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedBy reports whether the other end closed c within d.
func closedBy(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return !isTimeout(err)
		}
	}
}

var loadCodec = wire.CodecFor(reflect.TypeOf(&load{}))

// fullState is a full state of keys keys, each with endpoints endpoints (named
// with prefix) and a value each.
func fullState(keys, endpoints int, prefix string) *wire.State {
	st := &wire.State{Full: true, Seq: 1}
	data, _ := loadCodec.Encode(nil, &load{Requests: 1})
	idx := uint64(0)
	for k := range keys {
		st.Keys = append(st.Keys, wire.KeyDef{Index: uint64(k + 1), Name: fmt.Sprintf("key-%d", k), Codec: loadCodec.Kind, Fields: loadCodec.Fields})
		for e := range endpoints {
			idx++
			st.Entries = append(st.Entries, wire.EntryDef{Index: idx, Key: uint64(k + 1), Endpoint: fmt.Sprintf("%s-%d", prefix, e)})
			st.Values = append(st.Values, wire.ValueDef{Entry: idx, Data: data})
		}
	}
	return st
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestKeysArePerPeerBoundedAndDropped: a peer that defines 20,000 keys in one
// message is refused at once (it cost 14 s of CPU when each key copied the key
// table), keys beyond maxKeys per peer or the bound in all are refused, and a key
// no peer defines any more is gone after a sweep.
func TestKeysArePerPeerBoundedAndDropped(t *testing.T) {
	rs := newCluster(t, 1, func(o *Options) { o.MaxKeys = 8 })
	r := rs[0]
	for i := range 5 {
		r.listFake(fmt.Sprintf("m-%d", i))
	}
	start := time.Now()
	c := rawPeer(t, r, "m-0", start)
	before := r.rejected(RejectTooManyKeys)
	// The replica may close the connection before it has read all of it.
	_, _ = c.Write(wire.AppendState(nil, fullState(20000, 1, "ns/e")))
	// Parsing the message is most of it (slower under the race detector).
	r.waitRejected(t, 5*time.Second, RejectTooManyKeys, before, "20,000 keys in one message")
	if !closedBy(c, 2*time.Second) {
		t.Error("the connection of a peer over maxKeys stayed open")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("refusing 20,000 keys took %v", took)
	}

	// Up to maxKeys per peer is fine; the keys no replica of this one's sets are held
	// up to 4 × maxKeys in all: the fifth peer's keys go over it.
	var conns []net.Conn
	for i := range 4 {
		c := rawPeer(t, r, fmt.Sprintf("m-%d", i), start.Add(time.Second))
		st := fullState(8, 1, "ns/e")
		for k := range st.Keys {
			st.Keys[k].Name = fmt.Sprintf("peer-%d-key-%d", i, k)
		}
		if _, err := c.Write(wire.AppendState(nil, st)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	wait.For(t, 2*time.Second, func() string {
		if len(r.s.Document("peer-", "").Keys) == 32 {
			return ""
		}
		return fmt.Sprintf("%d keys defined by 4 peers, want 32", len(r.s.Document("peer-", "").Keys))
	})
	before = r.rejected(RejectTooManyKeys)
	c5 := rawPeer(t, r, "m-4", start)
	if _, err := c5.Write(wire.AppendState(nil, fullState(1, 1, "ns/e"))); err != nil {
		t.Fatal(err)
	}
	r.waitRejected(t, 2*time.Second, RejectTooManyKeys, before, "a key past 4 × maxKeys in all")

	// Peer 0 now defines one key only: its 8 go with the next sweep.
	if _, err := conns[0].Write(wire.AppendState(nil, &wire.State{Full: true, Seq: 2})); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 2*time.Second, func() string {
		r.s.sweep()
		if keys := r.s.Document("peer-0-", "").Keys; len(keys) > 0 {
			return fmt.Sprintf("keys no peer defines any more are kept: %v", keys)
		}
		return ""
	})
	if got := len(r.s.Document("peer-", "").Keys); got != 24 {
		t.Errorf("after peer 0 dropped its keys: %d keys, want the other peers' 24", got)
	}
}

// TestHelloIsCappedBeforeAdmission: 300 connections from a peer's address announce
// a 4 MiB hello and send 64 KiB of it. Each is refused and counted at once (as
// oversized, or too-many-pending past the bound of unadmitted connections), and the
// heap does not grow by their announced size (it reached 1.2 GB when a hello was
// buffered up to the message limit).
func TestHelloIsCappedBeforeAdmission(t *testing.T) {
	rs := newCluster(t, 1)
	r := rs[0]
	r.listFake("m")
	reasons := []string{RejectOversized, RejectTooManyPending}
	counted := func() float64 {
		n := 0.0
		for _, reason := range reasons {
			n += r.rejected(reason)
		}
		return n
	}
	before, heap0 := counted(), heapInUse()
	junk := make([]byte, 64<<10)
	for range 300 {
		c := dial(t, r)
		go func() {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = bufio.NewReader(c).ReadString('\n')
			b := append([]byte(wire.Preface), 0x80, 0x80, 0x80, 0x02) // a frame of 4 MiB
			_, _ = c.Write(append(b, junk...))
		}()
	}
	wait.For(t, 10*time.Second, func() string {
		if counted()-before >= 300 {
			return ""
		}
		return fmt.Sprintf("%v of 300 oversized hellos counted as %v", counted()-before, reasons)
	})
	if grown := int64(heapInUse()) - int64(heap0); grown > 64<<20 {
		t.Errorf("the heap grew by %d MB for 300 refused hellos", grown>>20)
	}
}

// TestPendingConnectionsAreBoundedPerSource: 100 connections from one peer address
// that never send their hello: at most maxPendingPerSource are held, the rest are
// refused at once, and the held ones are refused at the handshake timeout, all
// counted; meanwhile a real peer at another address still gets in.
func TestPendingConnectionsAreBoundedPerSource(t *testing.T) {
	const timeout = 500 * time.Millisecond
	rs := newCluster(t, 2, func(o *Options) { o.HandshakeTimeout = timeout; o.MaxPendingPerSource = 4 })
	r := rs[0]
	pendingBefore := r.rejected(RejectTooManyPending)
	timeoutsBefore := r.rejected(RejectHandshakeTimeout)
	for range 100 {
		c := dial(t, r)
		_, _ = c.Write([]byte(wire.Preface)) // and no hello
	}
	wait.For(t, 5*time.Second, func() string {
		if r.rejected(RejectTooManyPending)-pendingBefore >= 96 && r.rejected(RejectHandshakeTimeout)-timeoutsBefore >= 4 {
			return ""
		}
		return fmt.Sprintf("too-many-pending +%v (want 96), handshake-timeout +%v (want 4)", r.rejected(RejectTooManyPending)-pendingBefore, r.rejected(RejectHandshakeTimeout)-timeoutsBefore)
	})
	if got := testutil.ToFloat64(pendingGauge.WithLabelValues(r.instance)); got != 0 {
		t.Errorf("epp_peer_sync_pending_connections = %v after the timeout, want 0", got)
	}
	for i, x := range rs {
		if err := x.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 5*time.Second, rs, "k", "ns/e", 3)
}

// TestEveryRejectionIsCounted: what used to close a connection or drop a value
// without a count: a value that does not decode as this replica's type, a hello that
// never comes, a message that stalls half-way.
func TestEveryRejectionIsCounted(t *testing.T) {
	rs := newCluster(t, 1, func(o *Options) { o.TTL = 400 * time.Millisecond; o.HandshakeTimeout = 400 * time.Millisecond })
	r := rs[0]
	r.listFake("m")
	if err := r.s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}

	// A value of "k" in another codec (JSON where this replica's values are fields).
	before := r.rejected(RejectUndecodable)
	c := rawPeer(t, r, "m", time.Now())
	st := &wire.State{Full: true, Seq: 1, Keys: []wire.KeyDef{{Index: 1, Name: "k", Codec: wire.CodecJSON}},
		Entries: []wire.EntryDef{{Index: 1, Key: 1, Endpoint: "ns/e"}}, Values: []wire.ValueDef{{Entry: 1, Data: []byte(`{"Requests":5}`)}}}
	if _, err := c.Write(wire.AppendState(nil, st)); err != nil {
		t.Fatal(err)
	}
	r.waitRejected(t, 2*time.Second, RejectUndecodable, before, "a value that does not decode")
	if got := r.requests("k", "ns/e"); got != 1 {
		t.Errorf("Get = %d with an undecodable peer value, want this replica's 1", got)
	}
	doc := string(r.s.JSON("k", ""))
	if want := `"undecodable"`; !strings.Contains(doc, want) {
		t.Errorf("/debug/peer-sync does not show the undecodable value: %s", doc)
	}
	c.Close()

	// A connection from a peer's address that sends nothing after its preface.
	before = r.rejected(RejectHandshakeTimeout)
	c = dial(t, r)
	_, _ = c.Write([]byte(wire.Preface))
	r.waitRejected(t, 3*time.Second, RejectHandshakeTimeout, before, "a hello that never comes")

	// A peer that stalls in the middle of a message for the TTL.
	before = r.rejected(RejectStalled)
	c = rawPeer(t, r, "m", time.Now())
	if _, err := c.Write(wire.AppendState(nil, &wire.State{Full: true, Seq: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{50, 2, 0}); err != nil { // 3 of a 51-byte frame
		t.Fatal(err)
	}
	r.waitRejected(t, 3*time.Second, RejectStalled, before, "a message stalled half-way")
}

// TestEntriesAreBoundedByThePool: a peer's full states of 131,000 new endpoints,
// three times, took the heap to 322 MB. A peer may define what the pool can have
// (twice this replica's entries plus 256, at least minEntryBound): more is a
// counted rejection, and the heap stays small; within the bound, it is applied.
func TestEntriesAreBoundedByThePool(t *testing.T) {
	rs := newCluster(t, 1)
	r := rs[0]
	r.listFake("m")
	for i := range 1000 {
		if err := r.s.Set("key-0", fmt.Sprintf("ns/pool-%d", i), &load{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	bound := r.s.entryBound()
	if bound != DefaultMinEntryBound {
		t.Fatalf("entry bound with 1,000 local entries: %d, want the floor %d", bound, DefaultMinEntryBound)
	}
	heap0 := heapInUse()
	before := r.rejected(RejectTooManyEntries)
	for i := range 3 {
		c := rawPeer(t, r, "m", time.Now())
		// The replica may close the connection before it has read all of it.
		_, _ = c.Write(wire.AppendState(nil, fullState(1, 131000, fmt.Sprintf("ns/new-%d", i))))
		r.waitRejected(t, 5*time.Second, RejectTooManyEntries, before+float64(i), "131,000 entries")
	}
	if grown := int64(heapInUse()) - int64(heap0); grown > 32<<20 {
		t.Errorf("the heap grew by %d MB for three refused full states", grown>>20)
	}
	// Within the bound: applied.
	c := rawPeer(t, r, "m", time.Now())
	if _, err := c.Write(wire.AppendState(nil, fullState(1, bound, "ns/pool"))); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, func() string {
		if r.requests("key-0", "ns/pool-999") == 2 {
			return ""
		}
		return fmt.Sprintf("a full state within the bound: Get = %d, want 2", r.requests("key-0", "ns/pool-999"))
	})
}

// TestMemoryPerEntry measures what a peer's entry costs this replica, the figures
// the docs give for the memory bound: 30 peers' full states of 1,000 endpoints each,
// the pool's (every peer lists the same endpoints) and, the worst case, each peer
// endpoints of its own.
func TestMemoryPerEntry(t *testing.T) {
	const peersN, endpoints = 30, 1000
	for _, c := range []struct {
		name     string
		distinct bool
		max      float64
	}{
		{"one pool", false, maxBytesPerPeerEntry},
		{"endpoints of its own per peer", true, maxBytesPerDistinctPeerEntry},
	} {
		s, _ := benchSyncer(t, 0, 0)
		heap0 := heapInUse()
		if c.distinct {
			for p := range peersN {
				addBenchPeers(t, s, 1, endpoints, fmt.Sprintf("ns/peer-%d-vllm", p))
			}
		} else {
			addBenchPeers(t, s, peersN, endpoints, "ns/vllm")
		}
		perEntry := float64(int64(heapInUse())-int64(heap0)) / (peersN * endpoints)
		runtime.KeepAlive(s)
		t.Logf("%s: %.0f bytes per peer entry (%d peers x %d endpoints)", c.name, perEntry, peersN, endpoints)
		if perEntry > c.max {
			t.Errorf("%s: a peer's entry costs %.0f bytes, over the documented %.0f", c.name, perEntry, c.max)
		}
	}
}

// The memory bounds per peer entry the docs state (30 peers): every peer listing
// the pool's endpoints, and every peer listing endpoints of its own.
const (
	maxBytesPerPeerEntry         = 250
	maxBytesPerDistinctPeerEntry = 1000
)

// TestFutureStartIsRefused: a hello from a peer's address whose start is 2^64-1
// used to replace the real peer's connection, whose reconnects were then refused as
// stale-incarnation. It is refused as clock-skew; the real peer goes on counting.
func TestFutureStartIsRefused(t *testing.T) {
	rs := newCluster(t, 2)
	for i, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, rs, "k", "ns/e", 3)
	r := rs[0]
	before, stale := r.rejected(RejectClockSkew), r.rejected(RejectStaleIncarnation)
	c := dial(t, r)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = bufio.NewReader(c).ReadString('\n')
	h := wire.AppendHello([]byte(wire.Preface), wire.Hello{Version: wire.Version, Namespace: "ns", Name: rs[1].name, Start: 1<<64 - 1})
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
	r.waitRejected(t, 2*time.Second, RejectClockSkew, before, "a start time of 2^64-1")
	// The real peer reconnects (a restart of its pusher) and is not refused.
	rs[1].members.DeletePeer(r.meta().ID())
	rs[1].members.UpsertPeer(r.meta())
	if err := rs[1].s.Set("k", "ns/e", &load{Requests: 7}); err != nil {
		t.Fatal(err)
	}
	waitSum(t, 3*time.Second, rs, "k", "ns/e", 8)
	if got := r.rejected(RejectStaleIncarnation) - stale; got != 0 {
		t.Errorf("the real peer was refused %v times as stale-incarnation", got)
	}
}

// TestGetDecodesNothing: values are decoded when they arrive, so the first Get
// after a change allocates and decodes nothing, like every other (it decoded 30
// values, 91 allocations, at 30 peers).
func TestGetDecodesNothing(t *testing.T) {
	s, eps := benchSyncer(t, 30, 10)
	deltas := newDeltaSource(t, s, eps)
	applyOnly := testing.AllocsPerRun(50, deltas.apply)
	both := testing.AllocsPerRun(50, func() {
		deltas.apply() // every peer's value of every endpoint changes
		for _, ep := range eps {
			if _, ok := s.Get("inflight:p", ep, sum); !ok {
				t.Fatal("miss")
			}
		}
	})
	// Get allocates nothing but the aggregate's result: one per Get (and, under the
	// race detector, which drops sync.Pool items at random, a slice now and then).
	if got := both - applyOnly; got > 2*float64(len(eps)) {
		t.Errorf("the first Gets after a change allocate %.0f times for %d Gets, want only the aggregates' %d results", got, len(eps), len(eps))
	}
}
