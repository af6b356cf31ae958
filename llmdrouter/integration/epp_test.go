package integration_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
)

// replica is one EPP process.
type replica struct {
	*eppreplica.Replica
	out  *capture.Buffer
	pid  int
	stop func()
}

// eppConfig is an EPP configuration with endpointslice peer discovery of Service
// epp (with membership) served on debugAddress.
func eppConfig(membership, debugAddress string) string {
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - name: peers
    type: endpointslice-peer-discovery
    parameters:
      service: epp
      membership: %s
      debugAddress: %q
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
dataLayer:
  peerDiscovery:
    pluginRef: peers
`, membership, debugAddress)
}

// startReplicas starts n EPP replicas in ns as Deployment "epp" would: POD_NAME,
// POD_IP and NAMESPACE from the downward API, upstream's standalone mode
// (--endpoint-selector), ports of their own on 127.0.0.1.
func startReplicas(t *testing.T, ns string, n int, membership string, extraArgs ...string) []*replica {
	t.Helper()
	return startEPPs(t, ns, n, func(r *replica) string { return eppConfig(membership, r.Debug) }, extraArgs...)
}

// startEPPs starts n EPP replicas with the configuration config gives each; replica
// i has its own address in the suite's network namespace (netns.Addr(10+i)) as
// POD_IP, with a peer-sync port on it.
func startEPPs(t *testing.T, ns string, n int, config func(r *replica) string, extraArgs ...string) []*replica {
	t.Helper()
	return startWith(t, eppLaunch(t, eppBinary(t), extraArgs...), ns, n, config)
}

// eppLaunch is how this suite starts replicas of the EPP build bin: on its API
// server, with extraArgs after every replica's own flags.
func eppLaunch(t *testing.T, bin string, extraArgs ...string) eppreplica.Launch {
	t.Helper()
	return eppreplica.Launch{Bin: bin, Kubeconfig: kubeconfigFile(t), Dir: t.TempDir(), Args: extraArgs, Logf: t.Logf}
}

// startWith starts n replicas with l (replica i is eppreplica.New(i)) and returns
// once every one listens on all of its ports (see eppreplica.Launch.Start: a
// replica whose port another process took is started again on other ports).
func startWith(t *testing.T, l eppreplica.Launch, ns string, n int, config func(r *replica) string) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = &replica{Replica: eppreplica.New(i)}
	}
	if err := launch(t, l, ns, rs, config); err != nil {
		t.Fatal(err)
	}
	return rs
}

// launch starts the replicas rs with l, each stopped when the test ends (it must
// then exit with code 0); the error says which did not come up, and why.
func launch(t *testing.T, l eppreplica.Launch, ns string, rs []*replica, config func(r *replica) string) error {
	t.Helper()
	reps := make([]*eppreplica.Replica, len(rs))
	for i, r := range rs {
		reps[i] = r.Replica
	}
	procs, err := l.Start(ns, reps, func(i int) string { return config(rs[i]) })
	for i, p := range procs {
		if p != nil {
			rs[i].out, rs[i].stop, rs[i].pid = p.Output(), p.Supervise(t), p.Pid()
		}
	}
	return err
}

// kubeconfigFile is a kubeconfig of the suite's API server, in a file.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// view is the replica's peer set as its plugin serves it: "name@address ready" ...
func (r *replica) view() (string, error) {
	doc, _, err := peerdoc.Get(r.Debug)
	if err != nil {
		return "", err
	}
	if doc.Synced == nil || !*doc.Synced {
		return "", fmt.Errorf("not synced (lastError %q)", doc.LastError)
	}
	return describe(doc.Peers), nil
}

func describe(ps []peers.PeerEntry) string {
	var out []string
	for _, p := range ps {
		s := p.Name + "@" + p.Address
		if !p.Ready {
			s += "(not ready)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// want is what replica i of rs must list: the others, as listed.
func want(rs []*replica, i int, notReady map[int]bool, only ...int) string {
	var out []string
	for j, r := range rs {
		if j == i || (len(only) > 0 && !contains(only, j)) {
			continue
		}
		s := r.Pod + "@" + r.IP
		if notReady[j] {
			s += "(not ready)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// waitViews waits until every replica i in which lists want(i), and returns how long
// that took.
func waitViews(t *testing.T, step string, within time.Duration, rs []*replica, which []int, expect func(i int) string) time.Duration {
	t.Helper()
	return wait.For(t, within, func() string {
		var wrong []string
		for _, i := range which {
			got, err := rs[i].view()
			if err != nil {
				got = err.Error()
			}
			if w := expect(i); got != w {
				wrong = append(wrong, fmt.Sprintf("%s lists %q, want %q", rs[i].Pod, got, w))
			}
		}
		if len(wrong) > 0 {
			return step + ":\n  " + strings.Join(wrong, "\n  ")
		}
		return ""
	})
}

// writeSlice creates or replaces the Service's one slice with these replicas.
func writeSlice(t *testing.T, ns string, rs []*replica, members []int, notReady map[int]bool) {
	t.Helper()
	opts := []slicegen.SliceOption{slicegen.Namespace(ns)}
	for _, i := range members {
		var eo []slicegen.EndpointOption
		if notReady[i] {
			eo = append(eo, slicegen.NotReady())
		}
		opts = append(opts, slicegen.Pod(rs[i].Pod, rs[i].IP, eo...))
	}
	applySlice(t, ns, slicegen.Slice("epp-abcde", opts...))
}

// applySlice creates s in ns, or updates it, as written by the EndpointSlice
// controller would be.
func applySlice(t *testing.T, ns string, s discoveryv1.EndpointSlice) {
	t.Helper()
	s.Namespace = ns
	if err := eppreplica.ApplySlice(context.Background(), env.Clientset, s, "test"); err != nil {
		t.Fatal(err)
	}
}

// TestRealEPPReplicasKnowEachOther: three replicas of the real EPP, the Service's
// slice written as the EndpointSlice controller would; each replica's peer set is
// exactly the other two, a replica removed from the slice leaves the others within
// 1 s, and the EPP serves the peer view at /debug/plugins/state and the peer
// metrics on its own /metrics.
func TestRealEPPReplicasKnowEachOther(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "llmd", nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := startReplicas(t, ns, 3, "ready")
	all := []int{0, 1, 2}
	writeSlice(t, ns, rs, all, nil)
	took := waitViews(t, "three replicas", 90*time.Second, rs, all, func(i int) string { return want(rs, i, nil) })
	t.Logf("every replica listed the other two %s after the slice was written (EPP start-up included)", took.Round(time.Millisecond))

	// The EPP's own endpoints: the plugin's state and the metrics. The wiring starts
	// peer discovery before upstream's manager, whose metrics server may not listen
	// yet when the peers are known.
	var code int
	var state string
	wait.ForEvery(t, 30*time.Second, 100*time.Millisecond, func() string {
		if code, state = get(t, rs[0].Metrics, "/debug/plugins/state"); code == 0 {
			return "the EPP's metrics port does not answer: " + state
		}
		return ""
	})
	if code != http.StatusOK || !strings.Contains(state, `"peers"`) || !strings.Contains(state, rs[1].Pod) || !strings.Contains(state, "endpointslice-peer-discovery") {
		t.Fatalf("GET /debug/plugins/state on the EPP's metrics port: %d\n%s", code, state)
	}
	_, m := get(t, rs[0].Metrics, "/metrics")
	for _, w := range []string{`epp_peer_discovery_peers{discovery="peers"} 2`, `epp_peer_discovery_synced{discovery="peers"} 1`} {
		if !strings.Contains(m, w) {
			t.Errorf("the EPP's /metrics lacks %s", w)
		}
	}
	// The log says the peer store holds the initial set (upstream's MemoryPeerStore,
	// fed by the wiring).
	if o := rs[0].out.String(); !strings.Contains(o, "peer discovery ready") {
		t.Errorf("the EPP did not log that peer discovery is ready:\n%s", o)
	}

	// Replica 2 leaves the slice: the others follow within 1 s.
	writeSlice(t, ns, rs, []int{0, 1}, nil)
	left := waitViews(t, "replica 2 removed", 10*time.Second, rs, []int{0, 1}, func(i int) string { return want(rs, i, nil, 0, 1) })
	if left > time.Second {
		t.Errorf("replica 2 left the others' peer sets %s after the slice changed, want within 1 s", left.Round(time.Millisecond))
	}
	t.Logf("a replica removed from the slice left the others' peer sets within %s", left.Round(time.Millisecond))
}

// TestRealEPPLeaderElectionStandbys: with upstream's --ha-enable-leader-election
// only the leader reports ready (its gRPC readiness check, what the kubelet probes),
// so the EndpointSlice lists the standbys as not ready; with membership alive each
// replica still lists every other one, the standbys with ready=false. The slice is
// written from the replicas' own readiness answers, as the EndpointSlice controller
// would from the kubelet's probes.
func TestRealEPPLeaderElectionStandbys(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "llmdle", nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := startReplicas(t, ns, 3, "alive", "--ha-enable-leader-election")
	all := []int{0, 1, 2}
	// Exactly one replica, the lease holder, answers SERVING to readiness.
	var standbys map[int]bool
	wait.ForEvery(t, 90*time.Second, 200*time.Millisecond, func() string {
		standbys = map[int]bool{}
		var answers []string
		for i, r := range rs {
			st, err := r.Ready(context.Background())
			answers = append(answers, fmt.Sprintf("replica %d: %v %v", i, st, err))
			if err != nil || st != healthpb.HealthCheckResponse_SERVING {
				standbys[i] = true
			}
		}
		if len(standbys) != len(rs)-1 {
			return "not exactly one ready replica: " + strings.Join(answers, "; ")
		}
		return ""
	})
	leader := -1
	for i := range rs {
		if !standbys[i] {
			leader = i
		}
	}
	leases, err := env.Clientset.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(leases.Items) != 1 || leases.Items[0].Spec.HolderIdentity == nil || *leases.Items[0].Spec.HolderIdentity == "" {
		t.Fatalf("want one held leader election lease in %s: %v, %v", ns, leases, err)
	}
	t.Logf("replica %d leads (lease %s held by %s); the others answer readiness NOT_SERVING", leader, leases.Items[0].Name, *leases.Items[0].Spec.HolderIdentity)
	writeSlice(t, ns, rs, all, standbys)
	waitViews(t, "leader and standbys", 90*time.Second, rs, all, func(i int) string { return want(rs, i, standbys) })
}

var client = &http.Client{Timeout: 5 * time.Second}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("refusing to send a request to %s: tests talk to 127.0.0.1 only", addr)
	}
	return getNoFail(addr, path)
}

// TestRealEPPStartsAgainWhenAPortIsTaken: a port that was free when a replica's
// ports were picked and is taken by another process before the EPP binds it (what
// failed TestRealEPPLeaderElectionStandbys once on a busy machine) costs the
// replica a second start on other ports, not the test.
func TestRealEPPStartsAgainWhenAPortIsTaken(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "llmdport", nil)
	if err != nil {
		t.Fatal(err)
	}
	var taken net.Listener
	l := eppLaunch(t, eppBinary(t))
	l.BeforeStart = func(r *eppreplica.Replica, attempt int) {
		if attempt == 0 {
			if taken, err = net.Listen("tcp", r.Metrics); err != nil {
				t.Errorf("taking %s: %v", r.Metrics, err)
			}
		}
	}
	r := startWith(t, l, ns, 1, func(r *replica) string { return eppConfig("ready", r.Debug) })[0]
	if taken == nil {
		t.FailNow()
	}
	defer taken.Close()
	if r.Metrics == taken.Addr().String() {
		t.Fatalf("the replica's metrics address is %s, the port taken before its start", r.Metrics)
	}
	if code, _ := get(t, r.Metrics, "/metrics"); code != http.StatusOK {
		t.Fatalf("GET /metrics on the replica's metrics port %s: %d", r.Metrics, code)
	}
}
