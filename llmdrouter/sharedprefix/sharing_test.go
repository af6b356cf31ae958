package sharedprefix_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/prefix"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// startWith builds replica i of f as start does, with the shared index's
// parameters params.
func startWith(t *testing.T, f *pluginfleet.Fleet, i int, p *pool, params string) *replica {
	t.Helper()
	r := &replica{Replica: f.Start(i, syncerParams), pool: p}
	sp, err := fwkplugin.Registry[sharedprefix.Type]("shared-prefix", pluginfleet.Params(params), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	r.sp = sp.(*sharedprefix.Plugin)
	r.Handle.AddPlugin("shared-prefix", sp)
	sc, err := prefix.PrefixCachePluginFactory("prefix-cache-scorer", pluginfleet.Params(`{"prefixMatchInfoProducerName": "shared-prefix"}`), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	r.scorer = sc.(*prefix.Plugin)
	return r
}

// fleetWith starts n replicas with the shared index's parameters params, warm and
// connected.
func fleetWith(t *testing.T, n int, p *pool, params string) []*replica {
	t.Helper()
	f := pluginfleet.New(t, n)
	f.PodList = p.list
	var rs []*replica
	var fleet []*pluginfleet.Replica
	for i := range n {
		rs = append(rs, startWith(t, f, i, p, params))
	}
	for _, r := range rs {
		waitWarm(t, r)
		fleet = append(fleet, r.Replica)
	}
	pluginfleet.WaitConnected(t, connectedWithin, fleet...)
	return rs
}

// settled waits until every replica has merged every placement the others
// published: a barrier that needs no clock.
func settled(t *testing.T, rs []*replica) {
	t.Helper()
	for _, r := range rs {
		r.sp.WaitRecorded()
	}
	var published uint64
	for _, r := range rs {
		published += r.sp.State().Published
	}
	wait.For(t, 20*time.Second, func() string {
		for _, r := range rs {
			st := r.sp.State()
			if want := published - st.Published; st.Received+st.Dropped < want {
				return fmt.Sprintf("%s merged %d of its peers' %d placements", r.Name, st.Received, want)
			}
		}
		return ""
	})
}

// TestRecencyIsShared: at N = 8 replicas, a prefix that the fleet reuses every T,
// each time through another replica, with C/(N·λ) < T < C/λ (between two reuses
// the server gets 400 new blocks, its capacity C is 800: one replica that saw all
// the traffic keeps the prefix; a replica that saw only its own eighth of the
// reuses would evict it), stays in every replica's index: each reuse, routed
// anywhere, makes it the most recent everywhere. Before, recency was not shared,
// and every replica but the last to route it forgot it.
func TestRecencyIsShared(t *testing.T) {
	const n, capacity, between = 8, 800, 400
	p := newPool(1)
	rs := fleetWith(t, n, p, fmt.Sprintf(`{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": %d}`, capacity))
	hot := prompt(1, 20)
	conv := uint64(100)
	for round := range 3 * n {
		rs[round%n].route(t, hot, 0)
		// 400 new blocks, routed through every replica in turn.
		for k := 0; k < between/20; k++ {
			rs[(round+k)%n].route(t, prompt(conv, 20), 0)
			conv++
		}
		settled(t, rs)
		for _, r := range rs {
			if got, _ := r.matched(hot); got["vllm-0-rank-0"] != 20 {
				t.Fatalf("round %d: %s matches %d of the hot prefix's 20 blocks: it forgot a prefix the fleet reuses every %d blocks (capacity %d)", round, r.Name, got["vllm-0-rank-0"], between, capacity)
			}
		}
	}
	// Full servers that took the same placements in another order hold the same
	// blocks: the merge does not depend on the order.
	for _, r := range rs {
		if st := r.sp.State(); st.Blocks != capacity || st.Digest != rs[0].sp.State().Digest {
			t.Errorf("%s: %d blocks, digest %s; want the capacity %d and %s's digest %s", r.Name, st.Blocks, st.Digest, capacity, rs[0].Name, rs[0].sp.State().Digest)
		}
	}
}

// TestMergesAreCountedByOrigin: a peer's live placement merged counts in
// epp_shared_prefix_placements_total as origin "peer", once per placement, and
// this replica's own as "local".
func TestMergesAreCountedByOrigin(t *testing.T) {
	p := newPool(1)
	rs := fleetWith(t, 2, p, `{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": 800}`)
	local0, peer0 := sharedprefix.Placements("shared-prefix", "local"), sharedprefix.Placements("shared-prefix", "peer")
	received0 := rs[1].sp.State().Received
	for conv := range uint64(5) {
		rs[0].route(t, prompt(500+conv, 4), 0)
	}
	settled(t, rs)
	received := rs[1].sp.State().Received - received0
	if received == 0 {
		t.Fatal("replica 1 merged nothing of replica 0's placements")
	}
	if got := sharedprefix.Placements("shared-prefix", "peer") - peer0; got != float64(received) {
		t.Errorf("placements_total{origin=peer} rose by %v, want %d (the placements replica 1 merged)", got, received)
	}
	if got := sharedprefix.Placements("shared-prefix", "local") - local0; got != 5 {
		t.Errorf("placements_total{origin=local} rose by %v, want 5 (the requests replica 0 routed)", got)
	}
}

// TestUnreadCapacitiesConfiguredOtherwiseConflict: with autoTune and servers whose
// metrics give no capacity, each replica holds a server at its configured
// capacity, and states none in its exchanges; two configured otherwise never
// agree on the server, so their exchanges count a conflict rather than repair it
// every interval. (One that has read the capacity and one that has not compare:
// TestAReplicaThatHasNotReadItsServersCapacityGetsItsPeersIndex.)
func TestUnreadCapacitiesConfiguredOtherwiseConflict(t *testing.T) {
	p := newPool(1)
	f := pluginfleet.New(t, 2)
	f.PodList = p.list
	a := startWith(t, f, 0, p, `{"peerSyncerRef": "peer-syncer", "lruCapacityPerServer": 100}`)
	b := startWith(t, f, 1, p, `{"peerSyncerRef": "peer-syncer", "lruCapacityPerServer": 200}`)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b.Replica)
	wait.For(t, 10*time.Second, func() string {
		if a.sp.State().CapacityConflicts == 0 && b.sp.State().CapacityConflicts == 0 {
			return "no capacity conflict counted in the replicas' exchanges"
		}
		return ""
	})
}

// TestCapacityIsLocal: a peer's placement never sizes this replica's index: one
// that claims capacity 1 (a replica configured otherwise, mid-rollout) leaves the
// 2,000 blocks here, and is counted as a conflict. Before, it cut them to 1.
func TestCapacityIsLocal(t *testing.T) {
	p := newPool(2)
	f := pluginfleet.New(t, 2)
	f.PodList = p.list
	a := startWith(t, f, 0, p, `{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": 1}`)
	b := startWith(t, f, 1, p, `{"peerSyncerRef": "peer-syncer", "autoTune": false, "lruCapacityPerServer": 4000}`)
	for _, r := range []*replica{a, b} {
		waitWarm(t, r)
	}
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b.Replica)
	b.route(t, prompt(5, 2000), 0)
	a.route(t, prompt(6, 3), 0)
	settled(t, []*replica{a, b})
	st := b.sp.State()
	if blocks := serverBlocks(b)["llm/vllm-0-rank-0"]; blocks != 2003 {
		t.Errorf("B holds %d blocks of server 0, want its own 2,000 and A's 3 (a peer's capacity of 1 resized it)", blocks)
	}
	if st.CapacityConflicts == 0 {
		t.Error("no capacity conflict counted")
	}
	for _, s := range st.Servers {
		if s.Capacity != 4000 {
			t.Errorf("server %s has capacity %d on B, want B's 4,000", s.Server, s.Capacity)
		}
	}
	// A hostile peer that claims the largest capacity and floods: B's index stays
	// within B's capacity.
	for i := range 20 {
		hashes := make([]uint64, 7000)
		for j := range hashes {
			hashes[j] = uint64(i*7000 + j + 1)
		}
		a.sp.PublishRaw(sharedprefix.RawPlacement("llm/vllm-1-rank-0", 1<<24, time.Now().UnixMicro(), hashes))
		if i%5 == 4 {
			settled(t, []*replica{a, b})
		}
	}
	if blocks := serverBlocks(b)["llm/vllm-1-rank-0"]; blocks > 4000 {
		t.Errorf("B holds %d blocks of server 1 after a peer claimed capacity 2^24, over its own 4,000", blocks)
	}
}

// TestHostilePlacementsAreBounded: an admitted peer that sends placements for
// 100,000 made-up servers (and 1,000,000 placements of one block for one) costs
// nothing that stays: each is left out, counted, and nothing is held (the log
// version held them for a while: 345 MiB for 260,000 before a bound; 3 million
// no-op placements for a made-up server grew the heap by 360 MiB, uncounted).
func TestHostilePlacementsAreBounded(t *testing.T) {
	p := newPool(2)
	f := pluginfleet.New(t, 2)
	f.PodList = p.list
	a := start(t, f, 0, p)
	b := start(t, f, 1, p)
	waitWarm(t, a)
	waitWarm(t, b)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b.Replica)
	before := heapAlloc()
	start := time.Now()
	// In batches that fit the connection's queue (a publisher skips what does not).
	for i := range 1_100_000 {
		server := "made-up/one"
		if i < 100_000 {
			server = fmt.Sprintf("made-up/server-%d", i)
		}
		a.sp.PublishRaw(sharedprefix.RawPlacement(server, 1, time.Now().UnixMicro(), []uint64{uint64(i + 1)}))
		if i%50_000 == 49_999 {
			settled(t, []*replica{a, b})
		}
	}
	grew := int64(heapAlloc()) - int64(before)
	st := b.sp.State()
	t.Logf("1,100,000 placements for made-up servers: %d dropped in %v, heap %+.1f MiB", st.Dropped, time.Since(start).Round(time.Millisecond), float64(grew)/(1<<20))
	if st.Dropped != 1_100_000 || st.Blocks != 0 {
		t.Errorf("B dropped %d and indexes %d blocks: want every one dropped, none indexed", st.Dropped, st.Blocks)
	}
	if grew > 16<<20 {
		t.Errorf("the heap grew %d MiB", grew>>20)
	}
	// A placement decided an hour in B's future is refused: the connection is cut
	// (a block stamped then would stay the newest for an hour).
	cut := rejected(b, "malformed")
	a.sp.PublishRaw(sharedprefix.RawPlacement("llm/vllm-0-rank-0", 1, time.Now().Add(time.Hour).UnixMicro(), []uint64{7}))
	wait.Until(t, 5*time.Second, "the placement from the future refused", func() bool { return rejected(b, "malformed") > cut })
	if st := b.sp.State(); st.Blocks != 0 {
		t.Errorf("B indexes %d blocks of a placement from the future", st.Blocks)
	}
}

// rejected is r's syncer's count of refusals for reason.
func rejected(r *replica, reason string) float64 {
	doc := r.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-")
	return doc.Rejections[reason]
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
