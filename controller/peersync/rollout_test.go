package peersync

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// fleet is the EndpointSlices of an EPP Service as the replicas' discovery sees
// them: the members (the ready replicas), which every replica's discovery follows
// with a delay of its own, as informers on two replicas see a slice change a few
// milliseconds apart. Each replica's view gives its syncer the peers, whether its
// discovery has its first set (PeersReady), and whether it lists the replica itself
// (SelfListed).
type fleet struct {
	mu      sync.Mutex
	members map[string]peers.PeerMetadata // by name
	views   map[string]*view
}

// view is one replica's discovery.
type view struct {
	name    string
	store   *peers.MemoryPeerStore
	delay   time.Duration
	ready   chan struct{}
	once    sync.Once
	mu      sync.Mutex
	listed  bool
	changed chan struct{}
}

func newFleet() *fleet {
	return &fleet{members: map[string]peers.PeerMetadata{}, views: map[string]*view{}}
}

// join starts a replica named name whose discovery follows the fleet after delay.
func (f *fleet) join(t *testing.T, name string, delay time.Duration) *replica {
	v := &view{name: name, store: peers.NewMemoryPeerStore(), delay: delay, ready: make(chan struct{}), changed: make(chan struct{})}
	r := startReplica(t, name, func(o *Options) {
		o.Peers = v.store
		o.PeersReady = v.ready
		o.SelfListed = v.selfListed
	})
	f.mu.Lock()
	f.views[name] = v
	f.mu.Unlock()
	// Its discovery's first set comes after its delay, as an initial list does.
	go f.deliver(v)
	return r
}

// leave forgets name's view (its process stopped).
func (f *fleet) leave(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.views, name)
}

// set makes r a member (ready) or not, and lets every view follow.
func (f *fleet) set(r *replica, member bool) {
	f.mu.Lock()
	if member {
		f.members[r.name] = r.meta()
	} else {
		delete(f.members, r.name)
	}
	views := make([]*view, 0, len(f.views))
	for _, v := range f.views {
		views = append(views, v)
	}
	f.mu.Unlock()
	for _, v := range views {
		go f.deliver(v)
	}
}

// deliver applies the fleet's members to v after v's delay.
func (f *fleet) deliver(v *view) {
	time.Sleep(v.delay)
	f.mu.Lock()
	var others []peers.PeerMetadata
	_, listed := f.members[v.name]
	for name, m := range f.members {
		if name != v.name {
			others = append(others, m)
		}
	}
	f.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	peers.Diff(v.store.Peers(), others).Apply(v.store)
	if v.listed != listed {
		v.listed = listed
		close(v.changed)
		v.changed = make(chan struct{})
	}
	v.once.Do(func() { close(v.ready) })
}

func (v *view) selfListed() (bool, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.listed, v.changed
}

// rejectedAll is every rejection r counted, by reason, and their sum.
func (r *replica) rejectedAll() (float64, string) {
	total := 0.0
	var parts []string
	for _, reason := range rejectReasons {
		if n := r.rejected(reason); n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s=%v", reason, n))
		}
	}
	return total, strings.Join(parts, " ")
}

// inSyncWithAll waits until every replica counts every other's value.
func inSyncWithAll(t *testing.T, within time.Duration, rs []*replica) {
	t.Helper()
	for _, r := range rs {
		if err := r.s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, within, rs, "k", "ns/e", int64(len(rs)))
}

// TestCleanStartAndRollingReplacementCountNoRejection: 8 replicas started at once,
// their discovery seeing the members up to 50 ms apart (and its first set up to
// 50 ms after the syncer listens), then each of 3 replicas replaced one at a time as
// a rolling update with membership ready does it: the new replica starts not ready
// (not a member), becomes one, then the old one leaves the members and stops. A
// replica dials only while its own discovery lists it, and a connection from an
// address not listed yet waits for the listing: no replica counts a single
// rejection, and all are in sync after each step. (Each replica used to count
// unknown-source rejections on every start and rollout.)
func TestCleanStartAndRollingReplacementCountNoRejection(t *testing.T) {
	f := newFleet()
	rng := rand.New(rand.NewPCG(1, 2))
	delay := func() time.Duration { return time.Duration(rng.IntN(50)) * time.Millisecond }
	var rs []*replica
	for i := range 8 {
		rs = append(rs, f.join(t, fmt.Sprintf("epp-%d", i), delay()))
	}
	for _, r := range rs {
		f.set(r, true)
	}
	inSyncWithAll(t, 10*time.Second, rs)
	noRejections := func(step string) {
		t.Helper()
		for _, r := range rs {
			if n, by := r.rejectedAll(); n > 0 {
				t.Errorf("%s: %s counted rejections: %s", step, r.name, by)
			}
		}
	}
	noRejections("clean start")

	for i := range 3 {
		old := rs[i]
		next := f.join(t, fmt.Sprintf("epp-%d-new", i), delay())
		time.Sleep(300 * time.Millisecond) // starting, not ready: no member yet
		f.set(next, true)
		rs[i] = next
		inSyncWithAll(t, 10*time.Second, append([]*replica{old}, rs...))
		f.set(old, false) // terminating: no member any more
		time.Sleep(100 * time.Millisecond)
		old.stop()
		f.leave(old.name)
		inSyncWithAll(t, 10*time.Second, rs)
		noRejections(fmt.Sprintf("replacement of %s", old.name))
	}
}

// TestNonPeerIsRefusedInTimeAndBounded: a connection from an address that discovery
// never lists is refused and counted as unknown-source at the handshake timeout;
// 1,000 of them at once hold at most maxPendingPerSource places (the rest are
// refused at once, as too-many-pending), and the peers stay in sync throughout.
func TestNonPeerIsRefusedInTimeAndBounded(t *testing.T) {
	const timeout = 500 * time.Millisecond
	rs := newCluster(t, 3, func(o *Options) { o.HandshakeTimeout = timeout })
	r := rs[0]
	from := &net.TCPAddr{IP: net.ParseIP("127.0.0.2")} // no peer's address
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.port)))

	// One: refused within the handshake timeout (and a little scheduling).
	before := r.rejected(RejectUnknownSource)
	start := time.Now()
	d := net.Dialer{LocalAddr: from, Timeout: time.Second}
	c, err := d.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.waitRejected(t, timeout+2*time.Second, RejectUnknownSource, before, "a connection from 127.0.0.2")
	if took := time.Since(start); took < timeout-50*time.Millisecond {
		t.Errorf("refused after %v, before the handshake timeout %v: it was not given the time to be listed", took, timeout)
	}
	// /debug/peer-sync says it too, where the metrics are not at hand.
	if got, want := r.s.Document("", "").Rejections[RejectUnknownSource], r.rejected(RejectUnknownSource); got != want {
		t.Errorf("/debug/peer-sync rejections[unknown-source] = %v, the metric %v", got, want)
	}

	// A thousand at once.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	maxPending := 0.0
	go func() { // the waiting set, sampled
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				maxPending = max(maxPending, testutil.ToFloat64(pendingGauge.WithLabelValues(r.instance)))
			}
		}
	}()
	pendingBefore, unknownBefore := r.rejected(RejectTooManyPending), r.rejected(RejectUnknownSource)
	var conns []net.Conn
	for range 1000 {
		c, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	inSyncWithAll(t, 5*time.Second, rs)
	wait.For(t, timeout+5*time.Second, func() string {
		if r.rejected(RejectTooManyPending)-pendingBefore+r.rejected(RejectUnknownSource)-unknownBefore >= 1000 {
			return ""
		}
		return fmt.Sprintf("of 1,000: too-many-pending %v, unknown-source %v", r.rejected(RejectTooManyPending)-pendingBefore, r.rejected(RejectUnknownSource)-unknownBefore)
	})
	close(stop)
	wg.Wait()
	if maxPending > DefaultMaxPendingPerSource {
		t.Errorf("%v connections waited at once, more than the %d per source", maxPending, DefaultMaxPendingPerSource)
	}
	if got := r.rejected(RejectUnknownSource) - unknownBefore; got > DefaultMaxPendingPerSource {
		t.Errorf("%v connections waited for the listing, more than the %d per source", got, DefaultMaxPendingPerSource)
	}
}

// TestAReplicaPushesOnlyWhileListed: a replica whose own discovery does not list it
// (not ready yet) does not dial its peers, which would refuse it; once listed, it
// does.
func TestAReplicaPushesOnlyWhileListed(t *testing.T) {
	rs := newCluster(t, 1)
	listed := &view{changed: make(chan struct{})}
	late := startReplica(t, "late", func(o *Options) { o.SelfListed = listed.selfListed })
	late.members.UpsertPeer(rs[0].meta()) // it knows replica 0; replica 0 does not list it yet
	if err := late.s.Set("k", "ns/e", &load{Requests: 5}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(DefaultHandshakeTimeout + 500*time.Millisecond)
	if n, by := rs[0].rejectedAll(); n > 0 {
		t.Fatalf("replica 0 counted rejections of a replica that is not listed yet: %s", by)
	}
	if doc := late.s.Document("", ""); doc.Listed || doc.Peers[0].OutboundError != notListed {
		t.Errorf("/debug/peer-sync of the unlisted replica: listed %v, outbound error %q", doc.Listed, doc.Peers[0].OutboundError)
	}
	// Listed: both discoveries now know it.
	rs[0].members.UpsertPeer(late.meta())
	listed.mu.Lock()
	listed.listed = true
	close(listed.changed)
	listed.changed = make(chan struct{})
	listed.mu.Unlock()
	if err := rs[0].s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	waitSum(t, 3*time.Second, []*replica{rs[0], late}, "k", "ns/e", 6)
	if n, by := rs[0].rejectedAll(); n > 0 {
		t.Errorf("replica 0 counted rejections: %s", by)
	}
}

// setListed changes what v's selfListed reports.
func (v *view) setListed(listed bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.listed = listed
	close(v.changed)
	v.changed = make(chan struct{})
}

// TestAnUnlistedReplicaLeavesQuietly: a replica that its peer stops listing
// (terminating) and whose own discovery sees it 100 ms later redials in between; the
// peer holds that connection for the listing, and the replica drops it as soon as
// its own discovery stops listing it: the peer counts no rejection (it counted one
// when the dial waited out the peer's handshake timeout).
func TestAnUnlistedReplicaLeavesQuietly(t *testing.T) {
	rs := newCluster(t, 1)
	v := &view{changed: make(chan struct{}), listed: true}
	leaving := startReplica(t, "leaving", func(o *Options) { o.SelfListed = v.selfListed })
	leaving.members.UpsertPeer(rs[0].meta())
	rs[0].members.UpsertPeer(leaving.meta())
	for i, r := range []*replica{rs[0], leaving} {
		if err := r.s.Set("k", "ns/e", &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 2*time.Second, []*replica{rs[0], leaving}, "k", "ns/e", 3)
	rs[0].members.DeletePeer(leaving.meta().ID())
	time.Sleep(100 * time.Millisecond)
	v.setListed(false)
	time.Sleep(DefaultHandshakeTimeout + time.Second)
	if n, by := rs[0].rejectedAll(); n > 0 {
		t.Fatalf("the peer counted rejections of a replica that was leaving: %s", by)
	}
	leaving.s.mu.Lock()
	outs := leaving.s.outStreams()
	leaving.s.mu.Unlock()
	for _, o := range outs {
		if o.conn.Load() != nil {
			t.Errorf("the unlisted replica still holds a connection to %s", o.peer.ID())
		}
	}
}

// TestAPeerThatDialsInIsDialedBackAtOnce: a replica whose discovery lists a peer
// that is not up yet dials it with a growing backoff (up to maxBackoff). When that peer
// starts and connects to it, the replica dials back at once, not at the end of its
// backoff: a replica that starts gets its peers' pushes and broadcasts (the shared
// prefix index's snapshot, its placements) as soon as it is up.
func TestAPeerThatDialsInIsDialedBackAtOnce(t *testing.T) {
	// The late peer's port: nothing listens there until it starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	late := peers.PeerMetadata{Namespace: "ns", Name: "late", Address: "127.0.0.1", Port: port, Ready: true, Serving: true}
	a := startReplica(t, "a")
	a.members.UpsertPeer(late)
	// Long enough for the backoff to reach its bound (0.1, 0.2, 0.4, 0.8 s, then
	// 1 s: each wait is between half of it and all of it); then the start of a wait
	// of at least 0.5 s, just after a dial was refused.
	refused := func() float64 { return testutil.ToFloat64(connectErrors.WithLabelValues(a.instance, "refused")) }
	time.Sleep(3200 * time.Millisecond)
	n := refused()
	wait.ForEvery(t, 5*time.Second, time.Millisecond, func() string {
		if refused() == n {
			return "replica a did not dial the late peer again"
		}
		return ""
	})
	l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		t.Fatalf("the late peer's port %d: %v", port, err)
	}
	b := startReplica(t, "late", func(o *Options) { o.Listener = l })
	b.members.UpsertPeer(a.meta())
	took := wait.ForEvery(t, 5*time.Second, time.Millisecond, func() string {
		for _, p := range a.s.Document("-", "-").Peers {
			if p.ID == "ns/late" && p.Outbound == "in-sync" {
				return ""
			}
		}
		return "replica a has no connection to the late peer"
	})
	t.Logf("replica a connected to the late peer %v after it started (its backoff's wait: at least %v)", took.Round(time.Millisecond), maxBackoff/2)
	if took > maxBackoff/4 {
		t.Errorf("replica a connected to the late peer %v after it started and dialed in, want at once (well within its backoff's wait of at least %v)", took.Round(time.Millisecond), maxBackoff/2)
	}
}

// TestAPeerThatLeavesDuringItsHandshakeIsNotRefused: a peer dials while it is
// listed, and discovery stops listing it (terminating) between its connection's
// admission by address and its hello; it drops the connection when its own
// discovery sees it unlisted, as a replica does. That is a peer leaving, as the
// close of a connection in force would be, not a non-peer: no rejection is counted
// (the hello's wait for the listing used to end in an unknown-source refusal, seen
// once in a rollout on kind).
func TestAPeerThatLeavesDuringItsHandshakeIsNotRefused(t *testing.T) {
	r := startReplica(t, "r", func(o *Options) { o.HandshakeTimeout = 500 * time.Millisecond })
	r.listFake("leaving")
	c := dial(t, r)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("no banner: %v", err)
	}
	// Listed when it came (the banner says it passed), gone before its hello.
	r.members.DeletePeer(peers.PeerMetadata{Namespace: "ns", Name: "leaving"}.ID())
	h := wire.AppendHello([]byte(wire.Preface), wire.Hello{Version: wire.Version, Namespace: "ns", Name: "leaving", Start: uint64(time.Now().UnixNano())})
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // its own discovery sees it unlisted a little later
	c.Close()
	time.Sleep(time.Second) // past the handshake timeout
	if n, by := r.rejectedAll(); n > 0 {
		t.Errorf("counted rejections of a peer that left during its handshake: %s", by)
	}
}
