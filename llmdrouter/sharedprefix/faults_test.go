package sharedprefix_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// The paths on which the log version lost placements for good, each with real
// replicas (their plugins, over real connections) and full servers: after the
// fault heals, every replica's per-server digests are equal within healedWithin.
// Each runs twice: with anti-entropy, and without it (antiEntropyInterval 0),
// where the replicas must still differ: the fault did lose placements, and it is
// anti-entropy that repairs them.

// faultCapacity is each server's capacity: the traffic fills it several times.
const faultCapacity = 60

// healedWithin is the target: digests equal within 2 s after the fault heals
// (here: once the replicas are connected again).
const healedWithin = 2 * time.Second

// faultFleet is n replicas of the index (none started) on a pool of 4 servers.
type faultFleet struct {
	t    *testing.T
	f    *pluginfleet.Fleet
	p    *pool
	rs   []*replica
	ae   bool
	conv uint64
}

func newFaultFleet(t *testing.T, n int, ae bool) *faultFleet {
	ff := &faultFleet{t: t, f: pluginfleet.New(t, n), p: newPool(4), rs: make([]*replica, n), ae: ae, conv: 1000}
	ff.f.PodList = ff.p.list
	return ff
}

func (ff *faultFleet) params() string {
	interval := "1s"
	if !ff.ae {
		interval = "0s"
	}
	return fmt.Sprintf(`{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": %d, "antiEntropyInterval": %q}`, faultCapacity, interval)
}

// start starts replicas.
func (ff *faultFleet) start(which ...int) {
	for _, i := range which {
		ff.rs[i] = startWith(ff.t, ff.f, i, ff.p, ff.params())
	}
}

func (ff *faultFleet) replicas(which ...int) []*replica {
	var out []*replica
	for _, i := range which {
		out = append(out, ff.rs[i])
	}
	return out
}

// connected waits until the replicas of which are connected both ways.
func (ff *faultFleet) connected(which ...int) {
	ff.t.Helper()
	var rs []*pluginfleet.Replica
	for _, r := range ff.replicas(which...) {
		rs = append(rs, r.Replica)
	}
	pluginfleet.WaitConnected(ff.t, connectedWithin, rs...)
}

// disconnected waits until the replicas of which no longer list i as a peer.
func (ff *faultFleet) disconnected(i int, which ...int) {
	ff.t.Helper()
	wait.For(ff.t, 10*time.Second, func() string {
		for _, r := range ff.replicas(which...) {
			for _, p := range r.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-").Peers {
				if p.ID == "ns/"+ff.rs[i].Name {
					return fmt.Sprintf("%s still lists %s", r.Name, ff.rs[i].Name)
				}
			}
		}
		return ""
	})
}

// traffic routes n new conversations of 8 blocks through the replicas of which, in
// turn, to the servers in turn.
func (ff *faultFleet) traffic(n int, which ...int) {
	for k := range n {
		r := ff.rs[which[k%len(which)]]
		r.route(ff.t, prompt(ff.conv, 8), int(ff.conv%4))
		ff.conv++
	}
}

// agreed reports whether the replicas of which hold the same per-server digests,
// every server full, and says how they differ otherwise.
func (ff *faultFleet) agreed(which ...int) (bool, string) {
	var first map[string]string
	var diffs []string
	for n, r := range ff.replicas(which...) {
		st := r.sp.State()
		digests := map[string]string{}
		for _, s := range st.Servers {
			digests[s.Server] = s.Digest
			if s.Blocks != faultCapacity {
				diffs = append(diffs, fmt.Sprintf("%s holds %d blocks of %s, not full", r.Name, s.Blocks, s.Server))
			}
		}
		if len(st.Servers) != 4 {
			diffs = append(diffs, fmt.Sprintf("%s holds %d servers", r.Name, len(st.Servers)))
		}
		if n == 0 {
			first = digests
			continue
		}
		for server, d := range digests {
			if first[server] != d {
				diffs = append(diffs, fmt.Sprintf("%s's %s differs from %s's", r.Name, server, ff.replicas(which...)[0].Name))
			}
		}
	}
	return len(diffs) == 0, strings.Join(diffs, "; ")
}

// healed checks what the fault left: with anti-entropy, the digests are equal
// within healedWithin (it logs how long it took); without, they still differ
// after twice that.
func (ff *faultFleet) healed(fault string, which ...int) {
	t := ff.t
	t.Helper()
	for _, r := range ff.replicas(which...) {
		r.sp.WaitRecorded()
	}
	start := time.Now()
	if !ff.ae {
		time.Sleep(2 * healedWithin)
		if ok, _ := ff.agreed(which...); ok {
			t.Fatalf("%s, without anti-entropy: the replicas agree: the fault lost nothing, and the test proves nothing", fault)
		}
		_, how := ff.agreed(which...)
		t.Logf("%s, without anti-entropy: the replicas differ (as they should): %s", fault, how)
		return
	}
	var how string
	for {
		ok, h := ff.agreed(which...)
		if ok {
			t.Logf("%s: every replica's digests equal %v after the fault healed", fault, time.Since(start).Round(time.Millisecond))
			return
		}
		how = h
		if time.Since(start) > healedWithin {
			for _, r := range ff.replicas(which...) {
				t.Logf("%s: %+v", r.Name, r.sp.State().Peers)
			}
			t.Fatalf("%s: %v after the fault healed, the replicas differ: %s", fault, healedWithin, how)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// both runs a fault with anti-entropy and without.
func both(t *testing.T, fault func(t *testing.T, ff *faultFleet)) {
	for _, ae := range []bool{true, false} {
		name := "anti-entropy"
		if !ae {
			name = "without anti-entropy"
		}
		t.Run(name, func(t *testing.T) { fault(t, newFaultFleet(t, 3, ae)) })
	}
}

// TestAPeerThatLeavesAndComesBackGetsWhatItMissed (path 1): a replica that leaves
// the peer set (a readiness flap, a freeze past the readiness window, a discovery
// that lags) and comes back gets what its peers decided meanwhile, and they get
// what it decided. The log version forgot its cursor and took its next one as a
// first contact: 200 of 200 lost, 0 counted.
func TestAPeerThatLeavesAndComesBackGetsWhatItMissed(t *testing.T) {
	both(t, func(t *testing.T, ff *faultFleet) {
		ff.start(0, 1, 2)
		ff.connected(0, 1, 2)
		ff.traffic(60, 0, 1, 2)
		ff.f.List(2, false)
		ff.disconnected(2, 0, 1)
		ff.traffic(40, 0, 1, 2)
		ff.f.List(2, true)
		ff.connected(0, 1, 2)
		ff.healed("a replica that left the peer set and came back", 0, 1, 2)
	})
}

// TestAPeerThatConnectsLateGivesWhatItDecidedMeanwhile (path 2): a replica that
// starts (a rolling restart) fills its index from the peers it reaches first; a
// peer it reaches a little later (its discovery lags, its dial backs off) gives it
// what it decided in between. The log version's bootstrap came from one snapshot,
// and what the late peer published between that snapshot and its first cursor was
// never asked for: 100 of 100 lost, 0 counted.
func TestAPeerThatConnectsLateGivesWhatItDecidedMeanwhile(t *testing.T) {
	both(t, func(t *testing.T, ff *faultFleet) {
		ff.start(0, 1, 2)
		ff.connected(0, 1, 2)
		ff.traffic(60, 0, 1, 2)
		ff.f.Stop(2)
		ff.f.List(1, false)
		ff.disconnected(1, 0)
		ff.traffic(40, 0, 1)
		ff.start(2) // it reaches 0 first
		ff.connected(0, 2)
		ff.f.List(1, true)
		ff.connected(0, 1, 2)
		ff.healed("a replica that started, and a peer that connected late", 0, 1, 2)
	})
}

// TestAKilledPublishersPlacementsComeFromThePeersThatHoldThem (path 3): a replica
// killed while a peer missed some of its placements: the peers that hold them
// repair that peer, without the publisher. The log version's frames were lost for
// good on that peer (its publisher's new process reset the cursor; nothing
// relayed).
func TestAKilledPublishersPlacementsComeFromThePeersThatHoldThem(t *testing.T) {
	both(t, func(t *testing.T, ff *faultFleet) {
		ff.start(0, 1, 2)
		ff.connected(0, 1, 2)
		ff.traffic(60, 0, 1, 2)
		ff.f.List(2, false)
		ff.disconnected(2, 0, 1)
		ff.traffic(40, 0)             // reaches 1 only
		settled(t, ff.replicas(0, 1)) // 1 has them all
		ff.f.Stop(0)
		ff.f.List(0, false)
		ff.f.List(2, true)
		ff.connected(1, 2)
		ff.healed("the placements of a replica killed before a peer got them", 1, 2)
	})
}

// TestClockSkewChangesNothingButTheOrder (path 6): a replica whose clock runs 3 s
// behind its peers' (and one 3 s ahead) stamps its decisions by it; every replica
// orders them the same way, and a replica that starts, or comes back, gets what
// was decided before it, whatever the clocks. The log version skipped a
// publisher's past when it had started "after" the snapshot by a clock more than a
// second off.
func TestClockSkewChangesNothingButTheOrder(t *testing.T) {
	both(t, func(t *testing.T, ff *faultFleet) {
		ff.start(0, 1)
		ff.rs[0].sp.SetClockOffset(-3 * time.Second)
		ff.rs[1].sp.SetClockOffset(3 * time.Second)
		ff.connected(0, 1)
		ff.traffic(60, 0, 1)
		ff.f.List(1, false)
		ff.disconnected(1, 0)
		ff.traffic(40, 0, 1)
		ff.start(2) // started after 0 and 1 decided; its clock is right
		ff.connected(0, 2)
		ff.f.List(1, true)
		ff.connected(0, 1, 2)
		ff.healed("replicas whose clocks are 3 s apart", 0, 1, 2)
	})
}
