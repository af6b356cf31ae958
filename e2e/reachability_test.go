//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gruntwork-io/terratest/modules/helm"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/kindnode"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// probeInterval is the reachability probe interval of TestReachability.
const probeInterval = 2 * time.Second

// unreachableOne matches a replica's gauge of one unreachable peer.
var unreachableOne = regexp.MustCompile(`(?m)^epp_peer_discovery_unreachable_peers(\{[^}]*\})? 1$`)

// TestReachability (kind, 3 nodes): the chart with probing every 2 s and 3 replicas
// spread over the nodes. Every replica reports every peer reachable; with TCP to one
// replica's peer-sync port dropped inside its node (iptables in the node container,
// on the path from the other nodes), the others report that peer unreachable within
// two intervals, and it stays in every peer set; with the rule removed, reachable
// again within two intervals.
func TestReachability(t *testing.T) {
	if backend != "kind" {
		t.Skip("reachability runs on kind: on the local backend the pod IPs are fake and must never be dialled")
	}
	ctx := context.Background()
	nodes, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) < 3 {
		if os.Getenv("KIND_NODES") == "1" {
			t.Skipf("KIND_NODES=1: the reachability checks need the 3-node cluster (make e2e-kind's default)")
		}
		t.Fatalf("the kind cluster has %d node(s): the reachability checks need 3 (make kind-down, then make e2e-kind with KIND_NODES=3, the default)", len(nodes.Items))
	}

	ns := "e2e-reachability-" + rand.String(5)
	createNamespace(t, ns, true)
	v := newKindViewer(ns, on)
	w := ours{}.workload()
	t.Cleanup(v.close)

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`router:
  epp:
    replicas: 3
    topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
    peerDiscovery:
      enabled: true
      probeInterval: %s
`, probeInterval)), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := &helm.Options{KubectlOptions: kubectlOptions(ns), ValuesFiles: []string{values},
		ExtraArgs: map[string][]string{"install": {"--wait", "--timeout", "3m"}}}
	helm.InstallContext(t, ctx, opts, filepath.Join(repoRoot, "charts", "epp"), "epp")
	uninstalled := false
	t.Cleanup(func() {
		if t.Failed() {
			report(t, ns, w, v)
		}
		if !uninstalled {
			helm.DeleteContext(t, context.Background(), opts, "epp", true)
		}
	})
	waitConverged(t, ctx, ns, w, v, on, "install (3, probing)")

	s := read(t, ctx, ns, w)
	var onNodes []string
	for _, p := range s.Live {
		onNodes = append(onNodes, p.Spec.NodeName)
	}
	slices.Sort(onNodes)
	if len(slices.Compact(slices.Clone(onNodes))) != 3 {
		t.Fatalf("the replicas are on nodes %v: want one on each of the 3 (topology spread)", onNodes)
	}
	t.Logf("replicas on nodes %v", onNodes)

	// observe: per observer, what it reports of each peer ("ok", "down" or
	// "unprobed"), and an error when a peer set is not the exact expected one.
	expected := s.Expected(9005)
	observe := func() (map[string]map[string]string, string) {
		views := v.views(ctx, t, s.Live, eppContainer)
		if d := peerview.Diff(expected, views); d != "" {
			return nil, "peer sets: " + d
		}
		out := map[string]map[string]string{}
		for name, view := range views {
			out[name] = map[string]string{}
			for _, p := range view.Doc.Peers {
				switch {
				case p.Reachable == nil:
					out[name][p.Name] = "unprobed"
				case *p.Reachable:
					out[name][p.Name] = "ok"
				default:
					out[name][p.Name] = "down(" + p.ProbeError + ")"
				}
			}
		}
		return out, ""
	}
	// waitFor polls every 100 ms until want holds for every observer's report of
	// every peer, within limit; every sample must show the exact peer sets.
	waitFor := func(step string, limit time.Duration, want func(observer, peer string) string) time.Duration {
		t.Helper()
		took := wait.ForEvery(t, limit, 100*time.Millisecond, func() string {
			seen, bad := observe()
			if bad != "" {
				t.Fatalf("%s: a peer set changed while probing (probing must never change membership): %s", step, bad)
			}
			last := ""
			for observer, peers := range seen {
				for peer, got := range peers {
					if w := want(observer, peer); !strings.HasPrefix(got, w) {
						last += fmt.Sprintf(" %s sees %s %s (want %s);", observer, peer, got, w)
					}
				}
			}
			if last != "" {
				return step + ":" + last
			}
			return ""
		})
		t.Logf("%s: after %s", step, took.Round(time.Millisecond))
		return took
	}
	// The first probe of a peer comes within one interval of its arrival.
	waitFor("every peer reachable", 3*probeInterval, func(string, string) string { return "ok" })

	victim := s.Live[0]
	restore := kindnode.InsertRule(t, victim.Spec.NodeName, "FORWARD", "-d", victim.Status.PodIP+"/32", "-p", "tcp", "--dport", "9005", "-j", "DROP")
	t.Logf("dropping TCP to %s (%s) port 9005 in node %s", victim.Name, victim.Status.PodIP, victim.Spec.NodeName)
	down := waitFor("the others see "+victim.Name+" unreachable", 2*probeInterval, func(observer, peer string) string {
		if peer == victim.Name && observer != victim.Name {
			return "down"
		}
		return "ok"
	})
	if n := len(unreachableOne.FindAllString(strings.Join(v.metrics(ctx, t, s.Live, eppContainer), "\n"), -1)); n != 2 {
		t.Errorf("%d replicas count one unreachable peer, want the 2 others", n)
	}

	if err := restore(); err != nil {
		t.Fatal(err)
	}
	up := waitFor("the others see "+victim.Name+" reachable again", 2*probeInterval, func(string, string) string { return "ok" })
	record("%-17s %-20s %6.2fs", "helm/reachability", "seen unreachable", down.Seconds())
	record("%-17s %-20s %6.2fs", "helm/reachability", "seen reachable", up.Seconds())

	helm.DeleteContext(t, ctx, opts, "epp", true)
	uninstalled = true
	waitNothingLeft(t, ctx, ns, false)
}
