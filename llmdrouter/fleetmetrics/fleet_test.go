package fleetmetrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	upstreamdl "github.com/llm-d/llm-d-router/pkg/epp/datalayer"
	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	extractormetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/fleetmetrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

func init() {
	peerdiscovery.Register()
	peersyncer.Register()
	fleetmetrics.Register()
}

const (
	syncerParams = `{"peerDiscoveryRef": "peer-discovery", "interval": "50ms"}`
	// tick is upstream's --refresh-metrics-interval, default and least.
	tick = 50 * time.Millisecond
)

// modelServer is a model server's /metrics on 127.0.0.1: a queue of waiting
// requests of its own, and a count of the scrapes.
type modelServer struct {
	id      types.NamespacedName
	addr    string
	waiting int
	scrapes atomic.Int64
}

func startServers(t *testing.T, n int) []*modelServer {
	t.Helper()
	var out []*modelServer
	for i := range n {
		s := &modelServer{id: types.NamespacedName{Namespace: "llm", Name: fmt.Sprintf("vllm-%d-rank-0", i)}, waiting: i + 1}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.scrapes.Add(1)
			_, _ = fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\n"+
				"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2\n"+
				"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1\nvllm:e2e_request_latency_seconds_sum 1\nvllm:e2e_request_latency_seconds_count 1\n", s.waiting)
		}))
		t.Cleanup(srv.Close)
		s.addr = srv.Listener.Addr().String()
		out = append(out, s)
	}
	return out
}

func totalScrapes(servers []*modelServer) (n int64) {
	for _, s := range servers {
		n += s.scrapes.Load()
	}
	return n
}

// member is one replica: its syncer, the source and upstream's data layer runtime
// polling every server through it, with core-metrics-extractor.
type member struct {
	*pluginfleet.Replica
	src    *fleetmetrics.Plugin
	eps    []fwkdl.Endpoint
	cancel context.CancelFunc
}

func startMember(t *testing.T, r *pluginfleet.Replica, servers []*modelServer, srcParams string, tick time.Duration) *member {
	t.Helper()
	src, err := fwkplugin.Registry[fleetmetrics.Type]("fleet-metrics", pluginfleet.Params(srcParams), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := extractormetrics.CoreMetricsExtractorFactory("core-metrics-extractor", nil, r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	rt := upstreamdl.NewRuntime(tick)
	if err := rt.Configure(&upstreamdl.Config{Sources: []upstreamdl.DataSourceConfig{{Plugin: src, Extractors: []fwkplugin.Plugin{ext}}}}, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{Replica: r, src: src.(*fleetmetrics.Plugin), cancel: cancel}
	for _, s := range servers {
		m.eps = append(m.eps, rt.NewEndpoint(ctx, &fwkdl.EndpointMetadata{ID: s.id, Name: s.id.Name, MetricsHost: s.addr}))
	}
	t.Cleanup(func() {
		cancel()
		for _, ep := range m.eps {
			rt.ReleaseEndpoint(ep)
		}
	})
	return m
}

// startMembers starts three replicas.
func startMembers(t *testing.T, servers []*modelServer, srcParams string, tick time.Duration) (*pluginfleet.Fleet, []*member) {
	t.Helper()
	f := pluginfleet.New(t, 3)
	rs := f.StartAll(syncerParams)
	pluginfleet.WaitConnected(t, 30*time.Second, rs...)
	var ms []*member
	for _, r := range rs {
		ms = append(ms, startMember(t, r, servers, srcParams, tick))
	}
	return f, ms
}

// scrapeRate is the scrapes a second per server over d.
func scrapeRate(servers []*modelServer, d time.Duration) float64 {
	n0 := totalScrapes(servers)
	time.Sleep(d)
	return float64(totalScrapes(servers)-n0) / d.Seconds() / float64(len(servers))
}

// fresh reports the first of ms's endpoints whose metrics are not the server's
// or are older than two ticks ("" if none).
func fresh(ms []*member, servers []*modelServer) string { return freshAt(ms, servers, tick) }

func freshAt(ms []*member, servers []*modelServer, tick time.Duration) string {
	age := 2 * tick
	now := time.Now()
	for _, m := range ms {
		for i, ep := range m.eps {
			mt := ep.GetMetrics()
			if mt.WaitingQueueSize != servers[i].waiting {
				return fmt.Sprintf("%s has %s waiting %d, want %d", m.Name, servers[i].id.Name, mt.WaitingQueueSize, servers[i].waiting)
			}
			if a := now.Sub(mt.UpdateTime); a > age {
				return fmt.Sprintf("%s's metrics of %s are %v old", m.Name, servers[i].id.Name, a.Round(time.Millisecond))
			}
		}
	}
	return ""
}

// TestEachServerIsScrapedOnceForTheFleet: 3 replicas share 8 servers: each server
// is scraped 20 times a second, as by one replica (not 60), and every replica's
// extractors have every server's metrics, current within two ticks. Turned off,
// every replica scrapes every server.
func TestEachServerIsScrapedOnceForTheFleet(t *testing.T) {
	servers := startServers(t, 8)
	_, ms := startMembers(t, servers, `{"peerSyncerRef": "peer-syncer"}`, tick)
	wait.Until(t, 10*time.Second, "every replica to count 3 members", func() bool {
		for _, m := range ms {
			if len(m.src.State().Members) != 3 {
				return false
			}
		}
		return true
	})
	wait.ForEvery(t, 5*time.Second, 10*time.Millisecond, func() string { return fresh(ms, servers) })
	rate := scrapeRate(servers, 2*time.Second)
	t.Logf("3 replicas sharing: %.1f scrapes a second per server", rate)
	if rate < 14 || rate > 26 {
		t.Errorf("%.1f scrapes a second per server with 3 replicas sharing, want about 20 (one replica's)", rate)
	}
	// Every replica names the same owner for each server.
	owners := map[string]string{}
	for _, m := range ms {
		for _, s := range m.src.State().Servers {
			if o, ok := owners[s.Server]; ok && o != s.Owner {
				t.Errorf("%s: owned by %s for one replica, by %s for %s", s.Server, o, s.Owner, m.Name)
			}
			owners[s.Server] = s.Owner
		}
	}
	if len(owners) != len(servers) {
		t.Errorf("the replicas know %d servers, want %d", len(owners), len(servers))
	}
	if msg := fresh(ms, servers); msg != "" {
		t.Error(msg)
	}
}

// TestEveryReplicaScrapesEveryServerWithSharingOff is the reference: upstream's
// load, 20 scrapes a second per replica and server.
func TestEveryReplicaScrapesEveryServerWithSharingOff(t *testing.T) {
	servers := startServers(t, 4)
	_, ms := startMembers(t, servers, `{"share": false}`, tick)
	wait.ForEvery(t, 5*time.Second, 10*time.Millisecond, func() string { return fresh(ms, servers) })
	rate := scrapeRate(servers, 2*time.Second)
	t.Logf("3 replicas not sharing: %.1f scrapes a second per server", rate)
	if rate < 45 {
		t.Errorf("%.1f scrapes a second per server with 3 replicas not sharing, want about 60", rate)
	}
}

// TestAKilledOwnersServersAreTakenOver: the owner of some servers stops at once
// (its process killed: its syncer and collectors end) while the others poll: no
// server's metrics on a survivor go older than the TTL and two ticks (and 200ms
// of scheduling on a loaded machine), and the survivors share the servers again, each scraped as by one.
func TestAKilledOwnersServersAreTakenOver(t *testing.T) {
	servers := startServers(t, 8)
	f, ms := startMembers(t, servers, `{"peerSyncerRef": "peer-syncer"}`, tick)
	wait.ForEvery(t, 10*time.Second, 10*time.Millisecond, func() string {
		if n := len(ms[0].src.State().Members); n != 3 {
			return fmt.Sprintf("%d members", n)
		}
		return fresh(ms, servers)
	})
	// The victim is the replica that owns the most servers.
	owns := map[string]int{}
	for _, s := range ms[0].src.State().Servers {
		owns[s.Owner]++
	}
	victim, owned := 0, 0
	for i, m := range ms {
		if n := owns["ns/"+m.Name]; n > owned {
			victim, owned = i, n
		}
	}
	survivors := append(slices.Clone(ms[:victim]), ms[victim+1:]...)
	ms[victim].cancel()
	f.Stop(victim)
	killedAt := time.Now()
	worst := time.Duration(0)
	for time.Since(killedAt) < 2*time.Second {
		now := time.Now()
		for _, m := range survivors {
			for _, ep := range m.eps {
				worst = max(worst, now.Sub(ep.GetMetrics().UpdateTime))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	bound := fleetmetrics.DefaultOwnerTTL + 2*tick
	t.Logf("%s owned %d of 8 servers; after it was killed, the survivors' metrics were at most %v old (the promise: %v, the TTL and two ticks)", ms[victim].Name, owned, worst.Round(time.Millisecond), bound)
	if worst > bound+200*time.Millisecond {
		t.Errorf("a survivor's metrics of a server went %v old after its owner was killed, want at most %v (and 200ms of scheduling on a loaded machine)", worst.Round(time.Millisecond), bound)
	}
	for _, m := range survivors {
		if st := m.src.State(); len(st.Members) != 2 {
			t.Errorf("%s still counts %v", m.Name, st.Members)
		}
	}
	rate := scrapeRate(servers, 2*time.Second)
	t.Logf("2 survivors sharing: %.1f scrapes a second per server", rate)
	if rate < 14 || rate > 26 {
		t.Errorf("%.1f scrapes a second per server after the takeover, want about 20", rate)
	}
	if msg := fresh(survivors, servers); msg != "" {
		t.Error(msg)
	}
}

// TestSharingHoldsWithATickLongerThanTheTTL: with the runtime ticking every 400 ms
// (a longer --refresh-metrics-interval), longer than the TTL, a peer's share is
// current until the next tick: each server is scraped once a tick for the fleet,
// not once per replica.
func TestSharingHoldsWithATickLongerThanTheTTL(t *testing.T) {
	const slow = 400 * time.Millisecond
	servers := startServers(t, 4)
	_, ms := startMembers(t, servers, `{"peerSyncerRef": "peer-syncer"}`, slow)
	wait.ForEvery(t, 10*time.Second, 20*time.Millisecond, func() string {
		if n := len(ms[0].src.State().Members); n != 3 {
			return fmt.Sprintf("%d members", n)
		}
		return freshAt(ms, servers, slow)
	})
	rate := scrapeRate(servers, 4*time.Second)
	t.Logf("3 replicas sharing, a tick of %v: %.2f scrapes a second per server", slow, rate)
	if rate > 1.5*float64(time.Second)/float64(slow) {
		t.Errorf("%.2f scrapes a second per server, want about %.1f (one replica's, a tick of %v)", rate, float64(time.Second)/float64(slow), slow)
	}
	if msg := freshAt(ms, servers, slow); msg != "" {
		t.Error(msg)
	}
}
