package sharedprefix_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwkrh "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requesthandling"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	attrprefix "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/scheduling/scorer/prefix"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

func init() {
	peerdiscovery.Register()
	peersyncer.Register()
	sharedprefix.Register()
}

const syncerParams = `{"peerDiscoveryRef": "peer-discovery", "interval": "50ms"}`

// pool is the model servers: the pool's endpoints (handle.PodList).
type pool struct {
	mu    sync.Mutex
	names []types.NamespacedName
	// cacheBlocks is what each endpoint's metrics give as its cache's blocks (0:
	// none: autoTune takes the configured capacity).
	cacheBlocks int
}

func newPool(n int) *pool {
	p := &pool{}
	for i := range n {
		p.names = append(p.names, types.NamespacedName{Namespace: "llm", Name: fmt.Sprintf("vllm-%d-rank-0", i)})
	}
	return p
}

func (p *pool) list() []types.NamespacedName {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.names)
}

// set makes the pool servers 0 to n-1.
func (p *pool) set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = newPool(n).names
}

func (p *pool) remove(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = slices.DeleteFunc(p.names, func(n types.NamespacedName) bool { return n.Name == fmt.Sprintf("vllm-%d-rank-0", i) })
}

// endpoints are the pool's endpoints as the scheduler hands them to producers.
func (p *pool) endpoints() []fwksched.Endpoint {
	var out []fwksched.Endpoint
	for _, n := range p.list() {
		out = append(out, fwksched.NewEndpoint(&fwkdl.EndpointMetadata{ID: n, Name: n.Name}, &fwkdl.Metrics{CacheNumBlocks: p.cacheBlocks}, nil))
	}
	return out
}

// replica is one EPP's plugins with the shared index and upstream's prefix scorer
// reading it.
type replica struct {
	*pluginfleet.Replica
	sp     *sharedprefix.Plugin
	scorer *prefix.Plugin
	pool   *pool
}

// start builds replica i of f: peer-syncer, the shared index, prefix-cache-scorer.
func start(t *testing.T, f *pluginfleet.Fleet, i int, p *pool) *replica {
	t.Helper()
	r := &replica{Replica: f.Start(i, syncerParams), pool: p}
	sp, err := fwkplugin.Registry[sharedprefix.Type]("shared-prefix", pluginfleet.Params(`{"peerSyncerRef": "peer-syncer"}`), r.Handle)
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

func startFleet(t *testing.T, n int, p *pool) (*pluginfleet.Fleet, []*replica) {
	f := pluginfleet.New(t, n)
	f.PodList = p.list
	var rs []*replica
	for i := range n {
		rs = append(rs, start(t, f, i, p))
	}
	var fleet []*pluginfleet.Replica
	for _, r := range rs {
		waitWarm(t, r)
		fleet = append(fleet, r.Replica)
	}
	pluginfleet.WaitConnected(t, connectedWithin, fleet...)
	return f, rs
}

// connectedWithin bounds the wait for the replicas' syncers to connect (their
// dials back off while a peer is not started yet).
const connectedWithin = 30 * time.Second

func waitWarm(t *testing.T, r *replica) {
	t.Helper()
	wait.Until(t, 15*time.Second, r.Name+" to be warm", func() bool { return r.sp.State().Warm })
}

var requests int

// conversation is a prompt of blocks 64-token blocks, seeded.
func prompt(seed uint64, blocks int) []uint32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]uint32, blocks*64)
	for i := range out {
		out[i] = rng.Uint32()
	}
	return out
}

func request(tokens []uint32) *fwksched.InferenceRequest {
	requests++
	return &fwksched.InferenceRequest{RequestID: fmt.Sprintf("req-%d", requests), TargetModel: "m",
		Body: &fwkrh.InferenceRequestBody{TokenizedRequest: &fwkrh.TokenizedRequest{Prompts: []fwkrh.PromptTokens{{TokenIDs: tokens}}}}}
}

// route runs what the EPP runs for a request sent to server: Produce, then
// PreRequest with server as the pick.
func (r *replica) route(t *testing.T, tokens []uint32, server int) {
	t.Helper()
	req := request(tokens)
	eps := r.pool.endpoints()
	if err := r.sp.Produce(context.Background(), req, eps); err != nil {
		t.Fatal(err)
	}
	var target fwksched.Endpoint
	for _, e := range eps {
		if e.GetMetadata().ID.Name == fmt.Sprintf("vllm-%d-rank-0", server) {
			target = e
		}
	}
	res := &fwksched.SchedulingResult{PrimaryProfileName: "default",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"default": {TargetEndpoints: []fwksched.Endpoint{target}}}}
	if err := r.sp.PreRequest(context.Background(), req, res); err != nil {
		t.Fatal(err)
	}
	r.sp.WaitRecorded()
}

// matched is, per server, the request's blocks r's index says it holds, and
// upstream's prefix-cache-scorer's score of each, as a scheduling cycle computes
// them.
func (r *replica) matched(tokens []uint32) (map[string]int, map[string]float64) {
	req := request(tokens)
	eps := r.pool.endpoints()
	_ = r.sp.Produce(context.Background(), req, eps)
	blocks, scores := map[string]int{}, map[string]float64{}
	key := attrprefix.PrefixCacheMatchInfoDataKey.WithNonEmptyProducerName("shared-prefix")
	for _, e := range eps {
		if v, ok := e.Get(key); ok {
			blocks[e.GetMetadata().ID.Name] = v.(*attrprefix.PrefixCacheMatchInfo).MatchBlocks()
		}
	}
	for e, s := range r.scorer.Score(context.Background(), req, eps) {
		scores[e.GetMetadata().ID.Name] = s
	}
	return blocks, scores
}

// waitMatched waits until r matches want blocks of tokens on server, and returns
// how long it took.
func waitMatched(t *testing.T, r *replica, tokens []uint32, server, want int) time.Duration {
	t.Helper()
	return waitMatchedWithin(t, r, tokens, server, want, 5*time.Second)
}

func waitMatchedWithin(t *testing.T, r *replica, tokens []uint32, server, want int, within time.Duration) time.Duration {
	t.Helper()
	name := fmt.Sprintf("vllm-%d-rank-0", server)
	return wait.ForEvery(t, within, time.Millisecond, func() string {
		if got, _ := r.matched(tokens); got[name] != want {
			return fmt.Sprintf("%s: %s matches %d blocks, want %d (all: %v)", r.Name, name, got[name], want, got)
		}
		return ""
	})
}

// TestADecisionReachesEveryPeersIndex: a request routed through replica A to a
// server is, within the window and a write, in B's and C's index: the next turn of
// the conversation, sent to B or C, matches that server's blocks, and upstream's
// prefix-cache-scorer, reading this producer unchanged, scores it highest. A
// placement costs 8 bytes a block of the request, and its header.
func TestADecisionReachesEveryPeersIndex(t *testing.T) {
	p := newPool(4)
	_, rs := startFleet(t, 3, p)
	var lat []time.Duration
	for conv := range 40 {
		turn1 := prompt(uint64(conv), 10)
		server := conv % 4
		rs[0].route(t, turn1, server)
		for _, r := range rs[1:] {
			lat = append(lat, waitMatched(t, r, turn1, server, 10))
		}
		// The next turn, through B: it finds the server of the first turn.
		turn2 := append(slices.Clone(turn1), prompt(uint64(conv)+1000, 2)...)
		blocks, scores := rs[1].matched(turn2)
		name := fmt.Sprintf("vllm-%d-rank-0", server)
		if blocks[name] != 10 {
			t.Fatalf("turn 2 on B: %v, want 10 blocks on %s", blocks, name)
		}
		for other, s := range scores {
			if other != name && s >= scores[name] {
				t.Fatalf("prefix-cache-scorer on B scores %s %v, not below %s's %v", other, s, name, scores[name])
			}
		}
	}
	t.Logf("decision on A to a peer's index: p50 %v, p99 %v (window %v)", stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), sharedprefix.DefaultWindow)
	if p99 := stats.Percentile(lat, 0.99); p99 > 250*time.Millisecond {
		t.Errorf("p99 %v from a decision to a peer's index, want about the window (the bench measures it against 50 ms)", p99)
	}

	// Bytes: every placement names every block of its request (a peer that lacks
	// some gets them), 8 bytes each.
	before := rs[2].sp.State()
	turn1 := prompt(999, 10)
	rs[2].route(t, turn1, 1)
	rs[2].route(t, append(slices.Clone(turn1), prompt(998, 2)...), 1)
	rs[2].route(t, turn1, 1)
	after := rs[2].sp.State()
	if n := after.Published - before.Published; n != 3 {
		t.Errorf("%d placements published for a turn, its follow-up and a repeat, want 3", n)
	}
	bytes := after.PublishedBytes - before.PublishedBytes
	t.Logf("a turn of 10 new blocks, its follow-up of 2 and a repeat: %d bytes in all", bytes)
	// The version, the server, its capacity (3 bytes), the time (8), the first
	// position and the count (1 each).
	header := 1 + 1 + len("llm/vllm-1-rank-0") + 3 + 8 + 1 + 1
	if want := uint64(3*header + (10+12+10)*8); bytes != want {
		t.Errorf("the three placements took %d bytes, want 8 a block, plus the server, its capacity and the time (%d)", bytes, want)
	}
}

// TestBootstrapAtDefaultCapacityAndRestart: a replica that starts after its peers
// have an index of the default capacity (31,250 blocks on each of 8 servers) fills
// its own by anti-entropy, from its peers, within 2 s, and routes the next turns
// of conversations it never saw to their servers; restarted, it does it again; a
// peer that leaves takes nothing along (its placements describe the servers'
// caches).
func TestBootstrapAtDefaultCapacityAndRestart(t *testing.T) {
	p := newPool(8)
	f := pluginfleet.New(t, 3)
	f.PodList = p.list
	a := start(t, f, 0, p)
	b := start(t, f, 1, p)
	waitWarm(t, a)
	waitWarm(t, b)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b.Replica)
	// Fill every server to the default capacity, through A.
	const perRoute = 2048 // blocks a request hashes at most (131,072 tokens)
	full := sharedprefix.DefaultLRUCapacityPerServer
	for server := range 8 {
		for i := 0; i*perRoute < full; i++ {
			a.route(t, prompt(uint64(server*1000+i), perRoute), server)
		}
	}
	want := 8 * full
	waitBlocks(t, a, want)
	waitBlocks(t, b, want)
	last := (full+perRoute-1)/perRoute - 1
	probe := prompt(uint64(7*1000+last), perRoute) // server 7's last route: recent everywhere

	c := start(t, f, 2, p)
	built := time.Now()
	waitWarm(t, c)
	took := time.Since(built)
	t.Logf("a replica that started got an index of %d blocks warm %v after its start (%v after its plugin was built)", c.sp.State().Blocks, c.sp.State().WarmAfterSeconds, took.Round(time.Millisecond))
	// The target is 2 s at the default capacity: measured here (0.4 to 0.9 s on an
	// idle 2-core machine) and by make bench-routing's rolling restart. The bound
	// asserted is looser, for a machine loaded by the rest of make test (5 s seen
	// with three busy loops on 2 cores): a bootstrap that stalls or grows with the
	// square of the index fails it.
	if c.sp.State().WarmAfterSeconds > 10 {
		t.Errorf("warm %.2fs after the start, want about 2 s at the default capacity (10 s at most on a loaded machine)", c.sp.State().WarmAfterSeconds)
	}
	if got := c.sp.State().Blocks; got != want {
		t.Errorf("the new replica holds %d blocks, want its peers' %d: %+v", got, want, c.sp.State())
	}
	waitMatched(t, c, probe, 7, perRoute)

	// Restarted: warm again, from its peers.
	f.Stop(2)
	time.Sleep(100 * time.Millisecond)
	c = start(t, f, 2, p)
	waitWarm(t, c)
	waitMatched(t, c, probe, 7, perRoute)

	// A leaves: what it placed stays on B and C.
	f.Stop(0)
	time.Sleep(500 * time.Millisecond)
	waitMatched(t, b, probe, 7, perRoute)
	waitMatched(t, c, probe, 7, perRoute)
}

// TestAReplicaThatHasNotReadItsServersCapacityGetsItsPeersIndex: with autoTune
// (the default), a replica reads a server's capacity from the server's metrics
// when it first scores a request. A replica that starts (a rolling restart's new
// one) used to state the configured capacity in its exchanges until then, and its
// peers, which state the server's, refused to compare the server with it: it was
// warm with an empty index, and routed cold until an exchange after its first
// request (the hit rate lost during make bench-routing's rolling restart). Here
// it gets its peer's index, full LRUs included, before it scores a request, and
// holds the same blocks, to the digest, once it has read the capacity.
func TestAReplicaThatHasNotReadItsServersCapacityGetsItsPeersIndex(t *testing.T) {
	p := newPool(4)
	p.cacheBlocks = 64
	f := pluginfleet.New(t, 2)
	f.PodList = p.list
	a := start(t, f, 0, p)
	waitWarm(t, a)
	for i := range 48 { // 12 requests of 8 blocks a server: 96 blocks for 64 places
		a.route(t, prompt(uint64(i), 8), i%4)
	}
	waitBlocks(t, a, 4*64)
	b := start(t, f, 1, p)
	waitWarm(t, b)
	// Until it reads the capacity, b holds the servers at the configured one: at
	// least its peer's blocks (live placements sent before it connected may add
	// ones a has evicted since).
	held := map[string]int{}
	for _, s := range b.sp.State().Servers {
		held[s.Server] = s.Blocks
	}
	for _, s := range a.sp.State().Servers {
		if held[s.Server] < s.Blocks {
			t.Fatalf("warm before its first request, %s holds %d blocks of %s, want at least its peer's %d: %+v", b.Name, held[s.Server], s.Server, s.Blocks, b.sp.State().Servers)
		}
	}
	probe := prompt(47, 8)         // the last request to server 3
	waitMatched(t, b, probe, 3, 8) // b scores it: it reads the servers' capacity
	b.route(t, prompt(1000, 8), 0)
	wait.For(t, 5*time.Second, func() string {
		if got, want := b.sp.State(), a.sp.State(); got.Blocks != 4*64 || got.Digest != want.Digest {
			return fmt.Sprintf("after a request, %s holds %d blocks (digest %s), %s %d (%s); want 256 each, the same digest", b.Name, got.Blocks, got.Digest, a.Name, want.Blocks, want.Digest)
		}
		return ""
	})
}

// TestAReplicaWhosePoolIsNotListedYetFillsItsIndexOnceItIs: the EPP builds its
// plugins before its datastore has listed the pool's pods, so a replica that
// starts reads an empty pool first (an empty list, not "unknown"). Its peers'
// placements meanwhile are left out; once the pods are listed, anti-entropy brings
// its peers' index: a rolling restart does not cold-start prefix routing.
func TestAReplicaWhosePoolIsNotListedYetFillsItsIndexOnceItIs(t *testing.T) {
	full := newPool(4)
	f := pluginfleet.New(t, 3)
	f.PodList = full.list
	a := start(t, f, 0, full)
	b1 := start(t, f, 1, full)
	waitWarm(t, b1)
	waitWarm(t, a)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b1.Replica)
	conv := prompt(7, 6)
	a.route(t, conv, 2)

	unlisted := &pool{names: []types.NamespacedName{}} // the datastore before its first list
	f.PodList = unlisted.list
	b := start(t, f, 2, unlisted)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b1.Replica, b.Replica)
	a.route(t, prompt(8, 3), 1) // left out by b, whose pool is not read
	unlisted.set(4)             // the datastore lists the pods
	waitWarm(t, b)
	waitMatched(t, b, conv, 2, 6)
	waitMatched(t, b, prompt(8, 3), 1, 3)
}

func waitBlocks(t *testing.T, r *replica, want int) {
	t.Helper()
	wait.For(t, 20*time.Second, func() string {
		if got := r.sp.State().Blocks; got != want {
			return fmt.Sprintf("%s holds %d blocks, want %d", r.Name, got, want)
		}
		return ""
	})
}

// TestThePoolBoundsTheIndex: an endpoint that leaves the pool leaves every
// replica's index; a placement for an endpoint a replica's pool does not list is
// left out of its index, counted, and comes with anti-entropy once the pool lists
// it (a new server's first requests, which the replicas' pools list at different
// times).
func TestThePoolBoundsTheIndex(t *testing.T) {
	full, partial := newPool(4), newPool(4)
	partial.remove(3)
	f := pluginfleet.New(t, 2)
	f.PodList = full.list
	a := start(t, f, 0, full)
	f.PodList = partial.list
	b := start(t, f, 1, partial)
	waitWarm(t, a)
	waitWarm(t, b)
	pluginfleet.WaitConnected(t, connectedWithin, a.Replica, b.Replica)
	conv := prompt(1, 5)
	a.route(t, conv, 3) // not in B's pool
	a.route(t, conv, 2)
	waitMatched(t, b, conv, 2, 5)
	if got, _ := b.matched(conv); got["vllm-3-rank-0"] != 0 {
		t.Errorf("B holds a placement for an endpoint its pool does not have: %v", got)
	}
	if st := b.sp.State(); st.Dropped != 1 {
		t.Errorf("B dropped %d placements, want the one for the endpoint its pool does not list", st.Dropped)
	}
	partial.set(4) // B's pool lists the new server: anti-entropy brings its blocks
	waitMatchedWithin(t, b, conv, 3, 5, 5*time.Second)
	// vllm-2 leaves the pool: it leaves A's index and B's.
	full.remove(2)
	partial.remove(2)
	for _, r := range []*replica{a, b} {
		wait.For(t, 3*sharedprefix.PoolEvery, func() string {
			blocks := serverBlocks(r)
			if _, ok := blocks["llm/vllm-2-rank-0"]; ok {
				return fmt.Sprintf("%s: vllm-2 left the pool and stays in the index: %v", r.Name, blocks)
			}
			return ""
		})
	}
}

func serverBlocks(r *replica) map[string]int {
	out := map[string]int{}
	for _, s := range r.sp.State().Servers {
		out[s.Server] = s.Blocks
	}
	return out
}

// TestParametersAreChecked: what cannot work is refused at start-up, naming the
// parameter.
func TestParametersAreChecked(t *testing.T) {
	f := pluginfleet.New(t, 1)
	r := f.Start(0, syncerParams)
	for _, c := range []struct{ params, want string }{
		{`{}`, "peerSyncerRef is required"},
		{`{"peerSyncerRef": "nope"}`, `peerSyncerRef="nope" names no peer-syncer plugin`},
		{`{"peerSyncerRef": "peer-syncer", "window": "100ms"}`, "invalid window=100ms"},
		{`{"peerSyncerRef": "peer-syncer", "autoTune": false, "blockSizeTokens": 0}`, "invalid blockSizeTokens=0"},
		{`{"peerSyncerRef": "peer-syncer", "lruCapacityPerServer": -1}`, "must not be negative"},
		{`{"peerSyncerRef": "peer-syncer", "bogus": 1}`, "unknown field"},
		{`{"peerSyncerRef": "peer-syncer", "antiEntropyInterval": "10ms"}`, "invalid antiEntropyInterval=10ms: want 100ms to 1m, or 0 (off)"},
		{`{"peerSyncerRef": "peer-syncer", "antiEntropyInterval": "2m"}`, "invalid antiEntropyInterval=2m0s"},
	} {
		_, err := sharedprefix.Factory("sp", pluginfleet.Params(c.params), r.Handle)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.params, err, c.want)
		}
	}
	if s := fwkplugin.GetPluginStability(sharedprefix.Type); s != fwkplugin.StabilityBeta {
		t.Errorf("stability %v, want Beta", s)
	}
	if _, ok := fwkplugin.PluginsWithPluginDependencies[sharedprefix.Type]; !ok {
		t.Error("the producer does not declare its dependency on the syncer: the loader could build it first")
	}
}
