package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/inflight"
)

// syncInterval is the EPP's dataLayer.crossReplicaSyncInterval and the syncer's
// interval in these tests: llm-d-router's default.
const syncInterval = 200 * time.Millisecond

// syncConfig is an EPP configuration that schedules by in-flight requests alone
// (active-request-scorer, max-score-picker; no metrics scraped: the model servers
// are never dialed) and shares its in-flight load with its peers: endpointslice
// peer discovery of Service epp, and peer-syncer on the peer-sync port.
func syncConfig(r *replica) string {
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: active-request-scorer
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
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: active-request-scorer
      - pluginRef: max-score-picker
dataLayer:
  injectDefaults: false
  peerDiscovery:
    pluginRef: peer-discovery
  crossReplicaSyncerPluginRef: peer-syncer
  crossReplicaSyncInterval: %s
`, r.Debug, r.IP, r.SyncPort, syncInterval, syncInterval)
}

// modelServers creates n model-server pods (app=vllm), Running and Ready with
// addresses in the namespace's range, as the EPP's standalone mode finds its
// endpoints, and returns the EPP's endpoint IDs of them. Nothing dials them: the
// configuration scrapes no metrics.
func modelServers(t *testing.T, ns string, n int) []string {
	t.Helper()
	var ips []string
	for i := range n {
		ips = append(ips, netns.Addr(100+i))
	}
	ids, err := eppreplica.ModelServerPods(context.Background(), env.Clientset, ns, ips)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// writeSyncSlices writes the Service's slices as the EndpointSlice controller would
// for these replicas: one slice per replica here, since each has a peer-sync port
// of its own (they share one machine).
func writeSyncSlices(t *testing.T, ns string, rs []*replica, members []int) {
	t.Helper()
	var reps []*eppreplica.Replica
	for _, r := range rs {
		reps = append(reps, r.Replica)
	}
	if err := eppreplica.WriteSyncSlices(context.Background(), env.Clientset, ns, reps, members, "test"); err != nil {
		t.Fatal(err)
	}
}

// syncDoc is the replica's /debug/peer-sync for the in-flight load.
func (r *replica) syncDoc() (peersync.Document, error) {
	var doc peersync.Document
	code, body := getNoFail(r.Debug, "/debug/peer-sync?key=inflight:")
	if code != 200 {
		return doc, fmt.Errorf("GET /debug/peer-sync: %d %s", code, body)
	}
	err := json.Unmarshal([]byte(body), &doc)
	return doc, err
}

// loads is the aggregated in-flight requests per endpoint the replica's scoring
// reads (the in-flight producer's aggregate over every replica's value).
func (r *replica) loads() (map[string]int64, error) {
	doc, err := r.syncDoc()
	if err != nil {
		return nil, err
	}
	return inflight.Requests(doc)
}

// waitLoads waits until every replica in which sees want for the endpoints in want
// (inflight.WaitLoads), and returns how long it took.
func waitLoads(t *testing.T, step string, within time.Duration, rs []*replica, which []int, want map[string]int64) time.Duration {
	t.Helper()
	observers := map[string]func() (map[string]int64, error){}
	for _, i := range which {
		observers[rs[i].Pod] = rs[i].loads
	}
	return inflight.WaitLoads(t, step, within, observers, want)
}

// podOf maps the EPP's pick (ip:port) to the model server's ID.
func podOf(ids []string, endpoint string) string {
	host, _, _ := net.SplitHostPort(endpoint)
	for i, id := range ids {
		if netns.Addr(100+i) == host {
			return id
		}
	}
	return "unknown " + endpoint
}

// TestRealEPPSharesInFlightLoad: three replicas of the real EPP with peer-syncer.
// Requests held open through replica A count as in-flight load on A's endpoints on
// B and C (within 5 s; how long it took is logged as p50 and p99 over the runs, to
// compare with two intervals), steer B's picks to the other endpoint, and are gone
// everywhere when they end; a replica removed from the slice stops counting on the
// others within 1 s, a frozen one within the TTL, and once it is back the sums are
// exact again.
func TestRealEPPSharesInFlightLoad(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("this test dials the replicas' addresses: it must run in the suite's network namespace (netns.Isolate in TestMain)")
	}
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "sync", nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := modelServers(t, ns, 2)
	rs := startEPPs(t, ns, 3, syncConfig)
	all := []int{0, 1, 2}
	writeSyncSlices(t, ns, rs, all)
	waitViews(t, "three replicas", 90*time.Second, rs, all, func(i int) string { return want(rs, i, nil) })
	idle := map[string]int64{ids[0]: 0, ids[1]: 0}
	// Every replica has its peers in sync and both endpoints (each publishes zeros).
	waitLoads(t, "every replica publishing", 30*time.Second, rs, all, idle)
	a, b := rs[0], rs[1]

	// N requests held open through A, repeated: how long until B and C see them.
	var seen, cleared []time.Duration
	const runs, n = 8, 3
	var held map[string]int64
	for run := range runs {
		var reqs []*extproc.Request
		counts := map[string]int64{ids[0]: 0, ids[1]: 0}
		for range n {
			req, err := extproc.Send(a.GRPC)
			if err != nil {
				t.Fatalf("request through A: %v\nA's output:\n%s", err, a.out.String())
			}
			reqs = append(reqs, req)
			counts[podOf(ids, req.Endpoint)]++
		}
		seen = append(seen, waitLoads(t, fmt.Sprintf("run %d: %d requests held through A", run, n), 5*time.Second, rs, []int{1, 2}, counts))
		if run == runs-1 {
			held = counts
			// Keep these open for what follows.
			defer func() {
				for _, r := range reqs {
					r.Abort()
				}
			}()
			break
		}
		for _, r := range reqs {
			r.End()
		}
		cleared = append(cleared, waitLoads(t, fmt.Sprintf("run %d: requests ended", run), 5*time.Second, rs, all, idle))
	}
	t.Logf("in-flight load of %d requests held through A, on B and C: p50 %v, p99 %v (%d runs; interval %v); back to 0 after they end: p50 %v, p99 %v",
		n, stats.Percentile(seen, 0.5).Round(time.Millisecond), stats.Percentile(seen, 0.99).Round(time.Millisecond), runs, syncInterval,
		stats.Percentile(cleared, 0.5).Round(time.Millisecond), stats.Percentile(cleared, 0.99).Round(time.Millisecond))

	// A holds 3 requests: one endpoint has more than the other. Every request through
	// B goes to the less loaded one (B has none of its own): without the shared load
	// B's scores would tie and each pick would be a coin toss.
	less := ids[0]
	if held[ids[1]] < held[ids[0]] {
		less = ids[1]
	}
	for trial := range 8 {
		waitLoads(t, "B sees A's load", 5*time.Second, rs, []int{1}, held)
		req, err := extproc.Send(b.GRPC)
		if err != nil {
			t.Fatalf("request through B: %v", err)
		}
		if got := podOf(ids, req.Endpoint); got != less {
			t.Fatalf("trial %d: B sent a request to %s, which has %d requests in flight through A, not to %s with %d", trial, got, held[got], less, held[less])
		}
		req.End()
	}
	waitLoads(t, "B's own requests ended", 5*time.Second, rs, all, held)

	// A freezes (SIGSTOP: its connections stay open, nothing comes): B and C stop
	// counting its load within the TTL; when it wakes up, the sums are exact again.
	ttl := 3 * syncInterval
	if err := syscall.Kill(a.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := waitLoads(t, "A frozen", 10*time.Second, rs, []int{1, 2}, idle)
	if err := syscall.Kill(a.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("a frozen replica's load left the others %v after it froze (TTL %v)", frozen.Round(time.Millisecond), ttl)
	if frozen > ttl+2*syncInterval+500*time.Millisecond {
		t.Errorf("a frozen replica's load counted %v after it froze, want within the TTL (%v) plus an interval or two", frozen, ttl)
	}
	back := waitLoads(t, "A back", 10*time.Second, rs, []int{1, 2}, held)
	t.Logf("exact again %v after A woke up", back.Round(time.Millisecond))

	// A leaves the EndpointSlice: its load leaves B and C within 1 s.
	writeSyncSlices(t, ns, rs, []int{1, 2})
	left := waitLoads(t, "A removed from the slice", 10*time.Second, rs, []int{1, 2}, idle)
	t.Logf("a replica removed from the slice: its load left the others %v after the slice changed", left.Round(time.Millisecond))
	if left > time.Second {
		t.Errorf("A's load counted %v after its removal from the slice, want within 1 s", left)
	}
	// And back in: exact again.
	writeSyncSlices(t, ns, rs, all)
	waitLoads(t, "A back in the slice", 10*time.Second, rs, []int{1, 2}, held)
}

// getNoFail is get for helpers that report errors themselves.
func getNoFail(addr, path string) (int, string) {
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		return 0, "refusing to send a request to " + addr
	}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}
