package sharedprefix

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// Hostile or broken peers, admitted (they are members, at their own addresses,
// with their own names), against real replicas of the index: what one can make a
// replica send or hold is bounded, and once it is cut off the replicas agree again.

// hostileServers are the pool of these tests.
var hostileServers = []string{"llm/vllm-0", "llm/vllm-1", "llm/vllm-2", "llm/vllm-3"}

func hostilePool() []types.NamespacedName {
	var out []types.NamespacedName
	for _, s := range hostileServers {
		ns, name, _ := strings.Cut(s, "/")
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	return out
}

// honest builds the index plugin of fleet replica i (started), with capacity.
func honest(t *testing.T, f *pluginfleet.Fleet, i, capacity int) (*pluginfleet.Replica, *Plugin) {
	t.Helper()
	r := f.Start(i, `{"peerDiscoveryRef": "peer-discovery", "interval": "50ms"}`)
	p, err := Factory("shared-prefix", pluginfleet.Params(fmt.Sprintf(`{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": %d}`, capacity)), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	return r, p.(*Plugin)
}

// fill routes requests of 64 blocks through p until every server is full.
func fill(t *testing.T, p *Plugin, capacity int, seed uint64) {
	t.Helper()
	for i := range capacity / 16 {
		for _, s := range hostileServers {
			p.record(s, capacity, conversation(seed*1_000_000+uint64(i)*10+uint64(len(s)), 64), p.clock())
		}
	}
	wait.Until(t, 10*time.Second, "the servers full", func() bool { return p.idx.entries() == len(hostileServers)*capacity })
}

// mallory is a member whose broadcast of the index is driven by the test.
type mallory struct {
	r   *pluginfleet.Replica
	bc  *peersync.Broadcast
	mu  sync.Mutex
	got map[byte][][]byte // direct messages received, by kind
}

func startMallory(t *testing.T, f *pluginfleet.Fleet, i int) *mallory {
	t.Helper()
	m := &mallory{r: f.Start(i, `{"peerDiscoveryRef": "peer-discovery", "interval": "50ms"}`), got: map[byte][][]byte{}}
	var err error
	m.bc, err = m.r.Syncer.(*peersyncer.Plugin).Syncer().Broadcast(BroadcastName("shared-prefix"), peersync.BroadcastOptions{
		ReceiveMessage: func(msg peersync.Message) error {
			if msg.Kind == peersync.Direct && len(msg.Data) > 0 {
				m.mu.Lock()
				m.got[msg.Data[0]] = append(m.got[msg.Data[0]], append([]byte(nil), msg.Data...))
				m.mu.Unlock()
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mallory) send(t *testing.T, to string, parts ...[]byte) error {
	t.Helper()
	for _, p := range parts {
		if err := m.bc.SendTo(context.Background(), to, p); err != nil {
			return err
		}
	}
	return nil
}

// await waits for a message of kind, its parts joined (control) or counted
// (entries, until the final one), and returns the joined body and the bytes.
func (m *mallory) await(t *testing.T, kind byte, round uint64) ([]byte, int) {
	t.Helper()
	var body []byte
	total := 0
	wait.Until(t, 10*time.Second, fmt.Sprintf("a message of kind %#x", kind), func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		body, total = nil, 0
		for _, p := range m.got[kind] {
			_, r, flags, payload, _ := parseHeader(p)
			if r != round {
				continue
			}
			body = append(body, payload...)
			total += len(p)
			if flags&flagFinal != 0 {
				return true
			}
		}
		return false
	})
	return body, total
}

func directSent(r *pluginfleet.Replica, peer string) float64 {
	doc := r.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-")
	for _, b := range doc.Broadcasts {
		for _, ps := range b.Peers {
			if ps.Peer == peer {
				return ps.DirectBytesSent
			}
		}
	}
	return 0
}

// TestAPeerThatAsksForEverythingGetsItAtMostAsOftenAsAllowed: a member that
// claims an empty index gets what differs, the whole index (as a replica that
// starts does), once an exchange; asking the same group twice in one exchange
// ends it with nothing more sent; opening more exchanges than an interval allows
// cuts it off (exchange-rate). What it made the replica send is logged against
// what it sent. (A resend request with 64 identical ranges made a replica send
// 4.2 GiB for 37 KB before.)
func TestAPeerThatAsksForEverythingGetsItAtMostAsOftenAsAllowed(t *testing.T) {
	const capacity = 31250 // the default: about 7.6 blocks a leaf
	f := pluginfleet.New(t, 2)
	f.PodList = hostilePool
	r0, p0 := honest(t, f, 0, capacity)
	m := startMallory(t, f, 1)
	pluginfleet.WaitConnected(t, connectedWithinInternal, r0, m.r)
	fill(t, p0, capacity, 1)
	aged(p0)
	victim := "ns/" + r0.Name
	mal := "ns/" + m.r.Name
	empty := control{}
	for _, s := range hostileServers {
		empty.Roots = append(empty.Roots, rootInfo{Server: s, Capacity: capacity})
	}
	asked := 0
	exchangeOnce := func(round uint64, repeatGroup bool) int {
		parts := controlParts(msgOpen, round, controlBody(empty), DefaultBroadcastMax)
		if err := m.send(t, victim, parts...); err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			asked += len(p)
		}
		body, _ := m.await(t, msgGroups, round)
		groups, err := parseControl(body)
		if err != nil {
			t.Fatal(err)
		}
		var leaves control
		for _, g := range groups.Groups {
			for k := range groupCount {
				v := digestVector{Server: g.Server, Group: k, Digests: make([]byte, 8*64)}
				leaves.Leaves = append(leaves.Leaves, v)
				if repeatGroup {
					leaves.Leaves = append(leaves.Leaves, v)
				}
			}
		}
		parts = controlParts(msgLeaves, round, controlBody(leaves), DefaultBroadcastMax)
		if err := m.send(t, victim, parts...); err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			asked += len(p)
		}
		if repeatGroup {
			time.Sleep(500 * time.Millisecond)
			return 0
		}
		_, n := m.await(t, msgEntries, round)
		// The end of the exchange: nothing back.
		if err := m.send(t, victim, entryParts(msgEntriesBack, round, DefaultBroadcastMax, nil)...); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := directSent(r0, mal)
	got := exchangeOnce(1, false)
	sent := directSent(r0, mal) - before
	t.Logf("an exchange that claims an empty index: %d bytes asked, %.0f sent (the index: %d blocks)", asked, sent, p0.idx.entries())
	if float64(got) < 0.9*sent || sent > float64(p0.idx.entries())*20 {
		t.Errorf("sent %.0f bytes for an index of %d blocks: want about 17 a block, once", sent, p0.idx.entries())
	}
	// The same group twice: the exchange ends, nothing sent.
	before = directSent(r0, mal)
	exchangeOnce(2, true)
	if n := directSent(r0, mal) - before; n > 64<<10 {
		t.Errorf("an exchange that asked a group twice made the replica send %.0f bytes past its groups", n)
	}
	// Opening past the limit: cut off.
	cut := rejectedBy(r0, RejectExchangeRate)
	for k := range 3 * opensBurst {
		_ = m.send(t, victim, controlParts(msgOpen, uint64(100+k), controlBody(empty), DefaultBroadcastMax)...)
	}
	wait.Until(t, 5*time.Second, "the peer cut off for opening too often", func() bool { return rejectedBy(r0, RejectExchangeRate) > cut })
}

// DefaultBroadcastMax is the broadcast's message limit, for the hand-built parts.
const DefaultBroadcastMax = peersync.DefaultBroadcastMaxMessageBytes

// connectedWithinInternal bounds the wait for connections.
const connectedWithinInternal = 30 * time.Second

func rejectedBy(r *pluginfleet.Replica, reason string) float64 {
	return r.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-").Rejections[reason]
}

// TestARepairFromTheFutureIsRefused: a member whose repair carries blocks stamped
// an hour ahead of this replica's clock (they would stay the newest for an hour,
// pinned) is cut off, and none of them is indexed.
func TestARepairFromTheFutureIsRefused(t *testing.T) {
	const capacity = 2000
	f := pluginfleet.New(t, 2)
	f.PodList = hostilePool
	r0, p0 := honest(t, f, 0, capacity)
	m := startMallory(t, f, 1)
	pluginfleet.WaitConnected(t, connectedWithinInternal, r0, m.r)
	fill(t, p0, capacity, 2)
	aged(p0)
	victim := "ns/" + r0.Name
	// Claims another index for server 0, learns which leaves differ, and sends
	// blocks of them from the future.
	open := control{Roots: []rootInfo{{Server: hostileServers[0], Capacity: capacity, Blocks: capacity, Digest: 42}}}
	if err := m.send(t, victim, controlParts(msgOpen, 7, controlBody(open), DefaultBroadcastMax)...); err != nil {
		t.Fatal(err)
	}
	body, _ := m.await(t, msgGroups, 7)
	groups, err := parseControl(body)
	if err != nil || len(groups.Groups) != 1 {
		t.Fatalf("the replica answered %+v (%v), want the groups of the one server whose root differs", groups, err)
	}
	leaves := control{Leaves: []digestVector{{Server: hostileServers[0], Group: 0, Digests: make([]byte, 8*64)}}}
	if err := m.send(t, victim, controlParts(msgLeaves, 7, controlBody(leaves), DefaultBroadcastMax)...); err != nil {
		t.Fatal(err)
	}
	m.await(t, msgEntries, 7)
	future := stampOf(time.Now().Add(time.Hour).UnixMicro(), 0)
	var es []entry
	for h := uint64(1); len(es) < 10; h++ {
		if leafOf(blockHash(h)) == 3 {
			es = append(es, entry{hash: blockHash(h), stamp: future})
		}
	}
	cut := rejectedBy(r0, "malformed")
	_ = m.send(t, victim, entryParts(msgEntriesBack, 7, DefaultBroadcastMax, []leafEntries{{server: hostileServers[0], leaf: 3, entries: es}})...)
	wait.Until(t, 5*time.Second, "the repair from the future refused", func() bool { return rejectedBy(r0, "malformed") > cut })
	for _, e := range es {
		if _, ok := contents(p0.idx, hostileServers[0])[e.hash]; ok {
			t.Fatal("a block stamped an hour ahead was indexed")
		}
	}
}

// TestAPeerThatNeverAnswersKeepsNoReplicaCold: a replica that starts beside a
// member that takes exchanges and never answers (or answers nothing in time) and
// an honest peer holds the honest peer's index within a few seconds: an exchange
// waits stepTimeout at most, and runs beside another.
func TestAPeerThatNeverAnswersKeepsNoReplicaCold(t *testing.T) {
	const capacity = 2000
	f := pluginfleet.New(t, 3)
	f.PodList = hostilePool
	r0, p0 := honest(t, f, 0, capacity)
	m := startMallory(t, f, 1)
	pluginfleet.WaitConnected(t, connectedWithinInternal, r0, m.r)
	fill(t, p0, capacity, 3)
	start := time.Now()
	r2, p2 := honest(t, f, 2, capacity)
	pluginfleet.WaitConnected(t, connectedWithinInternal, r0, m.r, r2)
	wait.Until(t, stepTimeout+5*time.Second, "the new replica to hold its honest peer's index", func() bool {
		return p2.idx.entries() == p0.idx.entries() && isClosed(p2.ae.warm)
	})
	t.Logf("a replica beside a peer that never answers held its honest peer's %d blocks %v after it started", p2.idx.entries(), time.Since(start).Round(time.Millisecond))
}

// TestAnImpostorLosesNothingForGood: without mutual TLS, a process that dials a
// replica from a peer's address, in that peer's name, with a later start, is taken
// for the peer's new run: the real peer's connection is refused while it stays (a
// limit of admission by address, which mTLS with replica names closes). What the
// real peer decided meanwhile is not lost: once the impostor is gone, the replicas
// agree within 2 s.
func TestAnImpostorLosesNothingForGood(t *testing.T) {
	const capacity = 500
	f := pluginfleet.New(t, 2)
	f.PodList = hostilePool
	r0, p0 := honest(t, f, 0, capacity)
	r1, p1 := honest(t, f, 1, capacity)
	pluginfleet.WaitConnected(t, connectedWithinInternal, r0, r1)
	// The impostor: epp-1's name, epp-1's address as its source, a start of now.
	members := peers.NewMemoryPeerStore()
	members.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: r0.Name, Address: r0.IP, Port: int32(r0.Port), Ready: true, Serving: true})
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.9", fmt.Sprint(testenv.FreePort("127.0.0.9"))))
	if err != nil {
		t.Fatal(err)
	}
	imp, err := peersync.New(peersync.Options{Self: peers.Self{Namespace: "ns", Name: r1.Name}, Peers: members, Listener: l,
		SourceAddress: func(peers.PeerMetadata) net.IP { return net.ParseIP(r1.IP) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imp.Broadcast(BroadcastName("shared-prefix"), peersync.BroadcastOptions{Receive: func(string, []byte) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = imp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wait.Until(t, 10*time.Second, "the impostor in force on epp-0", func() bool {
		return rejectedBy(r0, peersync.RejectStaleIncarnation) > 0
	})
	// The real epp-1 routes while it is refused.
	for i := range 200 {
		p1.record(hostileServers[i%4], capacity, conversation(uint64(5000+i), 16), p1.clock())
	}
	cancel()
	<-done
	healed := time.Now()
	wait.Until(t, 10*time.Second, "the replicas to agree once the impostor is gone", func() bool {
		return digestOf(p0.idx.serverStates()) == digestOf(p1.idx.serverStates())
	})
	took := time.Since(healed)
	t.Logf("what the real peer decided while an impostor held its place: on its peer %v after the impostor left", took.Round(time.Millisecond))
	if took > 2*time.Second+time.Second { // its dial backs off up to 1 s
		t.Errorf("the replicas agreed %v after the impostor left, want within 2 s of the real peer's reconnection", took)
	}
}
