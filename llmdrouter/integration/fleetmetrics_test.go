package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/fleetmetrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
)

// refreshInterval is the EPP's --refresh-metrics-interval in these tests:
// upstream's default and least.
const refreshInterval = 50 * time.Millisecond

// fleetMetricsConfig is an EPP configuration that routes by the servers' queues
// (queue-scorer, read from the metrics) with the model servers scraped once for the
// fleet: fleet-metrics-data-source in place of upstream's metrics source.
func fleetMetricsConfig(r *replica) string {
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: max-score-picker
  - name: peer-discovery
    type: endpointslice-peer-discovery
    parameters:
      service: epp
      debugAddress: %q
      peerSyncAddress: "%s:%d"
  - name: peer-syncer
    type: peer-syncer
    parameters:
      peerDiscoveryRef: peer-discovery
      interval: %s
  - name: fleet-metrics
    type: fleet-metrics-data-source
    parameters:
      peerSyncerRef: peer-syncer
  - type: core-metrics-extractor
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: max-score-picker
dataLayer:
  injectDefaults: false
  sources:
    - pluginRef: fleet-metrics
      extractors:
        - pluginRef: core-metrics-extractor
  peerDiscovery:
    pluginRef: peer-discovery
  crossReplicaSyncerPluginRef: peer-syncer
  crossReplicaSyncInterval: %s
`, r.Debug, r.IP, r.SyncPort, syncInterval, syncInterval)
}

// metricsServer serves a model server's /metrics on its pod's address in the
// suite's namespace, and records when each scrape came.
type metricsServer struct {
	mu      sync.Mutex
	scrapes []time.Time
}

func startMetricsServers(t *testing.T, n int) []*metricsServer {
	t.Helper()
	var out []*metricsServer
	for i := range n {
		m := &metricsServer{}
		l, err := net.Listen("tcp", net.JoinHostPort(netns.Addr(100+i), strconv.Itoa(eppreplica.ModelServerPort)))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			m.mu.Lock()
			m.scrapes = append(m.scrapes, time.Now())
			m.mu.Unlock()
			_, _ = fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\n"+
				"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n"+
				"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.1\n", i+1)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		out = append(out, m)
	}
	return out
}

// between is the server's scrapes in [from, to).
func (m *metricsServer) between(from, to time.Time) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []time.Time
	for _, at := range m.scrapes {
		if !at.Before(from) && at.Before(to) {
			out = append(out, at)
		}
	}
	return out
}

// rate is the scrapes a second of every server in [from, to), per server.
func rate(servers []*metricsServer, from, to time.Time) float64 {
	n := 0
	for _, s := range servers {
		n += len(s.between(from, to))
	}
	return float64(n) / to.Sub(from).Seconds() / float64(len(servers))
}

// longestGap is the longest time in [from, to) a server went without a scrape.
func longestGap(servers []*metricsServer, from, to time.Time) time.Duration {
	worst := time.Duration(0)
	for _, s := range servers {
		last := from
		for _, at := range append(s.between(from, to), to) {
			worst = max(worst, at.Sub(last))
			last = at
		}
	}
	return worst
}

// fleetState is the replica's /debug/fleet-metrics/fleet-metrics.
func (r *replica) fleetState() (fleetmetrics.State, error) {
	var st fleetmetrics.State
	code, body := getNoFail(r.Debug, fleetmetrics.DebugPath("fleet-metrics"))
	if code != 200 {
		return st, fmt.Errorf("GET %s: %d %s", fleetmetrics.DebugPath("fleet-metrics"), code, body)
	}
	err := json.Unmarshal([]byte(body), &st)
	return st, err
}

// sharing waits until each of rs counts them all as members and has every
// server's metrics, read within two intervals.
func sharing(t *testing.T, step string, rs []*replica, servers int) {
	t.Helper()
	wait.ForEvery(t, 60*time.Second, 50*time.Millisecond, func() string {
		for _, r := range rs {
			st, err := r.fleetState()
			if err != nil {
				return err.Error()
			}
			if len(st.Members) != len(rs) {
				return fmt.Sprintf("%s: %s counts %v", step, r.Pod, st.Members)
			}
			if len(st.Servers) != servers {
				return fmt.Sprintf("%s: %s knows %d servers", step, r.Pod, len(st.Servers))
			}
			for _, s := range st.Servers {
				if s.AgeSeconds < 0 || s.AgeSeconds > 2*refreshInterval.Seconds() {
					return fmt.Sprintf("%s: %s's metrics of %s are %.3fs old", step, r.Pod, s.Server, s.AgeSeconds)
				}
			}
		}
		return ""
	})
}

// TestRealEPPScrapesEachServerOnceForTheFleet: three replicas of the real EPP with
// fleet-metrics-data-source route by the servers' queues (to the one with the
// fewest requests waiting, by the metrics each replica has, its own scrapes or its
// peers' shares) while each server is scraped as by one replica (about 20 times a
// second, not 60). The replica that
// owns the most servers is killed (SIGKILL) under traffic: no server goes
// unscraped for longer than the TTL and two intervals (and scheduling), and the
// survivors share them all. When it starts again, it takes its servers back, and
// once every replica counts it, each server is scraped as by one again.
func TestRealEPPScrapesEachServerOnceForTheFleet(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("this test serves the model servers' metrics on their pods' addresses: it must run in the suite's network namespace (netns.Isolate in TestMain)")
	}
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "fleet-metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	const nServers = 6
	servers := startMetricsServers(t, nServers)
	modelServers(t, ns, nServers)
	l := eppLaunch(t, eppBinary(t), "--refresh-metrics-interval="+refreshInterval.String())
	rs := make([]*replica, 3)
	reps := make([]*eppreplica.Replica, 3)
	for i := range rs {
		rs[i] = &replica{Replica: eppreplica.New(i)}
		reps[i] = rs[i].Replica
	}
	procs := make([]*proc.Process, 3)
	start := func(which ...int) {
		t.Helper()
		var these []*eppreplica.Replica
		for _, i := range which {
			these = append(these, reps[i])
		}
		ps, err := l.Start(ns, these, func(k int) string { return fleetMetricsConfig(rs[which[k]]) })
		for k, p := range ps {
			if p != nil {
				i := which[k]
				procs[i], rs[i].out, rs[i].pid = p, p.Output(), p.Pid()
				t.Cleanup(func() { _ = p.Stop() })
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	start(0, 1, 2)
	all := []int{0, 1, 2}
	writeSyncSlices(t, ns, rs, all)
	waitViews(t, "three replicas", 90*time.Second, rs, all, func(i int) string { return want(rs, i, nil) })
	sharing(t, "three replicas", rs, nServers)

	// Traffic through every replica for the rest of the test (bounded in count and
	// time), as a gateway sends it.
	clients := make([]*extproc.Client, 3)
	var clientsMu sync.Mutex
	dial := func(i int) {
		c, err := extproc.Dial(rs[i].GRPC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clientsMu.Lock()
		clients[i] = c
		clientsMu.Unlock()
	}
	for _, i := range all {
		dial(i)
	}
	trafficCtx, stopTraffic := context.WithTimeout(ctx, 60*time.Second)
	defer stopTraffic()
	var routed, failed, fewest int
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; n < 3000 && trafficCtx.Err() == nil; n++ {
			clientsMu.Lock()
			c := clients[n%3]
			clientsMu.Unlock()
			rctx, cancel := context.WithTimeout(trafficCtx, 2*time.Second)
			req, err := c.Route(rctx, extproc.Call{Path: "/v1/chat/completions", Body: chat(n % 20), ID: fmt.Sprintf("req-%d-%d", n, time.Now().UnixNano())})
			cancel()
			if err != nil {
				failed++ // the killed replica's, until it is back
			} else {
				if host, _, _ := net.SplitHostPort(req.Endpoint); host == netns.Addr(100) {
					fewest++ // vllm-0: the fewest requests waiting
				}
				req.End()
				routed++
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() {
		stopTraffic()
		wg.Wait()
		t.Logf("%d requests routed, %d to the server with the fewest waiting; %d failed (the killed replica's)", routed, fewest, failed)
		// queue-scorer reads the metrics each replica's extractor has: from its own
		// scrapes or its peers' shares. A replica without them would see no queue
		// anywhere and pick at random.
		if routed == 0 || float64(fewest) < 0.95*float64(routed) {
			t.Errorf("%d of %d requests went to the server with the fewest requests waiting, want at least 95%%", fewest, routed)
		}
	}()

	from := time.Now()
	time.Sleep(2 * time.Second)
	shared := rate(servers, from, time.Now())
	t.Logf("3 replicas: %.1f scrapes a second per server", shared)
	if shared < 14 || shared > 26 {
		t.Errorf("3 replicas sharing scrape each server %.1f times a second, want about 20 (one replica's)", shared)
	}

	// Kill the replica that owns the most servers.
	st, err := rs[0].fleetState()
	if err != nil {
		t.Fatal(err)
	}
	owns := map[string]int{}
	for _, s := range st.Servers {
		owns[s.Owner]++
	}
	id := func(i int) string { return ns + "/" + rs[i].Pod }
	victim := slices.MaxFunc(all, func(a, b int) int { return owns[id(a)] - owns[id(b)] })
	if owns[id(victim)] == 0 {
		t.Fatalf("no replica owns a server (owners %v): the test would not test a takeover", owns)
	}
	killedAt := time.Now()
	if err := syscall.Kill(rs[victim].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[victim].Exited()
	time.Sleep(3 * time.Second)
	gap := longestGap(servers, killedAt.Add(-refreshInterval), time.Now())
	bound := fleetmetrics.DefaultOwnerTTL + 2*refreshInterval
	t.Logf("%s killed (it owned %v of %d servers): the longest a server went unscraped was %v (the promise: %v, the TTL and two intervals)",
		rs[victim].Pod, owns, nServers, gap.Round(time.Millisecond), bound)
	if gap > bound+250*time.Millisecond {
		t.Errorf("a server went %v without a scrape after its owner was killed, want at most %v (and 250ms of scheduling on a loaded machine)", gap.Round(time.Millisecond), bound)
	}
	var survivors []*replica
	for _, i := range all {
		if i != victim {
			survivors = append(survivors, rs[i])
		}
	}
	sharing(t, "after the kill", survivors, nServers)
	from = time.Now()
	time.Sleep(time.Second)
	if r := rate(servers, from, time.Now()); r < 14 || r > 26 {
		t.Errorf("2 survivors scrape each server %.1f times a second, want about 20", r)
	}

	// Started again: it takes its servers back.
	start(victim)
	dial(victim)
	restarted := time.Now()
	sharing(t, "the killed replica started again", rs, nServers)
	counted := time.Now()
	st, err = rs[victim].fleetState()
	if err != nil {
		t.Fatal(err)
	}
	back := 0
	for _, s := range st.Servers {
		if s.Owner == st.Self {
			back++
		}
	}
	if back == 0 {
		t.Errorf("%s owns no server after it started again: %+v", rs[victim].Pod, st.Servers)
	}
	time.Sleep(fleetmetrics.DefaultOwnerTTL)
	from = time.Now()
	time.Sleep(2 * time.Second)
	again := rate(servers, from, time.Now())
	t.Logf("%s started again: every replica counted it %v later, and it owns %d servers; then %.1f scrapes a second per server (from %v to %v, the overlap: %.1f)",
		rs[victim].Pod, counted.Sub(restarted).Round(time.Millisecond), back, again, restarted.Sub(killedAt).Round(time.Millisecond), counted.Sub(killedAt).Round(time.Millisecond),
		rate(servers, restarted, counted.Add(fleetmetrics.DefaultOwnerTTL)))
	if again < 14 || again > 26 {
		t.Errorf("after the replica came back, each server is scraped %.1f times a second, want about 20 (no server scraped twice as often past a TTL)", again)
	}
	if gap := longestGap(servers, killedAt.Add(5*time.Second), time.Now()); gap > bound+250*time.Millisecond {
		t.Errorf("a server went %v without a scrape while the replica came back", gap.Round(time.Millisecond))
	}
}
