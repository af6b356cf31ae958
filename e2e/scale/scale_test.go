//go:build e2escale

// Package scale_test puts the real EndpointSlice controller under load on the local
// control plane (`make e2e-scale`): the chart with peer discovery and 3 real
// replicas (llm-d-router's EPP with the plugin, bin/epp-llmd processes), plus 1,000 KWOK pods behind the same Service that no
// process runs. Every real replica must list exactly the other 1,002 ready pods
// after the 1,000 appear and after a rolling restart of the 1,000; the time to
// converge and the replicas' CPU are recorded.
package scale_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/localcluster"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/podproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

const (
	fillers      = 1000
	realReplicas = 3
	release      = "epp"
	realKey      = "e2e.epp-peer-discovery.io/real"
	fillKey      = "e2e.epp-peer-discovery.io/filler"
	peerPort     = 9005
	// serviceSelector is the chart's Service selector for the release.
	serviceSelector = "app.kubernetes.io/name=epp,app.kubernetes.io/instance=" + release
	// convergeTimeout bounds each wait; the suite fails past it.
	convergeTimeout = 5 * time.Minute
)

var (
	cluster *localcluster.Cluster
	root    string
)

func TestMain(m *testing.M) {
	var err error
	if root, err = testenv.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-scale:", err)
		os.Exit(1)
	}
	for _, b := range []string{"bin/epp-llmd", "bin/helm"} {
		if _, err := os.Stat(filepath.Join(root, b)); err != nil {
			fmt.Fprintf(os.Stderr, "e2e-scale: %s not found: run `make e2e-scale` (it builds it)\n", b)
			os.Exit(1)
		}
	}
	bins, err := localcluster.DefaultBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-scale:", err)
		os.Exit(1)
	}
	cluster, err = localcluster.Start(context.Background(), bins, os.Stderr, localcluster.WithPodCapacity(3*fillers))
	if err != nil {
		if cluster != nil {
			fmt.Fprint(os.Stderr, cluster.Logs(30))
			cluster.Stop()
		}
		fmt.Fprintln(os.Stderr, "e2e-scale:", err)
		os.Exit(1)
	}
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

func TestThousandPodsRollingRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cs := cluster.Clientset
	ns, err := (&testenv.Env{Config: cluster.Config, Clientset: cs}).CreateNamespace(ctx, "scale", nil)
	if err != nil {
		t.Fatal(err)
	}
	// llm-d-router's EPP checks a token on /metrics (the chart's default).
	unread, err := peerview.ReadMetricsAs(ctx, cs)
	defer unread()
	if err != nil {
		t.Fatal(err)
	}

	// The chart, 3 replicas, each a bin/epp-llmd process.
	helm(t, "install", release, filepath.Join(root, "charts", "epp"), "--namespace", ns, "--wait", "--timeout", "3m",
		"--set", "router.epp.peerDiscovery.enabled=true", "--set", "router.epp.replicas="+strconv.Itoa(realReplicas),
		"--set-string", "router.epp.podLabels."+strings.ReplaceAll(realKey, ".", `\.`)+"=true")
	rt, err := podproc.New(cluster.Config, podproc.DefaultBinaries(root), ns, "app.kubernetes.io/name=epp,"+realKey+"=true", "epp")
	if err != nil {
		t.Fatal(err)
	}
	rtCtx, stopRT := context.WithCancel(ctx)
	go rt.Run(rtCtx)
	defer func() { stopRT(); rt.Wait() }()
	converge(t, ctx, rt, ns, realReplicas, "3 real replicas")

	// 1,000 pods behind the same Service that no process runs: the chart's pod
	// template (same ports and labels), without the label of the real ones.
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *dep.Spec.Template.DeepCopy()
	delete(tmpl.Labels, realKey)
	// Nothing runs in them: no resource requests, so that 1,000 fit the fake node
	// whatever the EPP container requests.
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Resources = corev1.ResourceRequirements{}
	}
	tmpl.Labels[fillKey] = "true"
	filler := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "filler"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](fillers),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": release, fillKey: "true"}},
			Template: tmpl,
		},
	}
	cpu0 := cpuTimes(t, rt)
	start := time.Now()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	up := converge(t, ctx, rt, ns, realReplicas+fillers, "1,000 KWOK pods created")
	cpu1 := cpuTimes(t, rt)
	report(t, "0 -> 1,000 KWOK pods", up, start, cpu0, cpu1)

	// A rolling restart of the 1,000 (kubectl rollout restart): 25% surge, 25% down.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	start = time.Now()
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "filler", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var rolledOut time.Time
	changes0 := peerChanges(t, ctx, rt)
	restarted := converge(t, ctx, rt, ns, realReplicas+fillers, "rolling restart of the 1,000", func() string {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "filler", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != fillers || st.Replicas != fillers || st.AvailableReplicas != fillers {
			return fmt.Sprintf("rollout: %d updated, %d replicas, %d available of %d", st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, fillers)
		}
		if rolledOut.IsZero() {
			rolledOut = time.Now()
		}
		return ""
	})
	t.Logf("the Deployment reported the rollout complete after %v", rolledOut.Sub(start).Round(100*time.Millisecond))
	cpu2 := cpuTimes(t, rt)
	report(t, "rolling restart of the 1,000", restarted, start, cpu1, cpu2)
	changes1 := peerChanges(t, ctx, rt)
	var per []string
	h := peerview.Histogram{}
	for _, r := range rt.Replicas() {
		per = append(per, fmt.Sprintf("%s %.0f", r.Pod, changes1[r.Pod]-changes0[r.Pod]))
		if text, err := peerview.FetchMetrics(ctx, r.MetricsAddr); err == nil {
			h.AddHistogram(text, "epp_peer_discovery_propagation_delay_seconds")
		}
	}
	line := fmt.Sprintf("e2e-scale: peer changes published by each real replica during the restart: %s; propagation delay over both steps (n=%.0f): p50 %.3fs p90 %.3fs p99 %.3fs",
		strings.Join(per, ", "), h.Count(), h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99))
	t.Log(line)

	if err := cs.AppsV1().Deployments(ns).Delete(ctx, "filler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, ctx, rt, ns, realReplicas, "the 1,000 deleted")
	helm(t, "uninstall", release, "--namespace", ns, "--wait")
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, err := range rt.Errors() {
		t.Errorf("process runtime: %v", err)
	}
}

// converge waits until exactly want pods behind the Service are ready and nothing
// else exists (no pod starting or terminating), and every real replica lists
// exactly the other ready pods; it returns when that was first seen.
func converge(t *testing.T, ctx context.Context, rt *podproc.Runtime, ns string, want int, step string, settled ...func() string) time.Time {
	t.Helper()
	var seen time.Time
	wait.ForEvery(t, convergeTimeout, 500*time.Millisecond, func() string {
		if len(settled) > 0 {
			if why := settled[0](); why != "" {
				return step + ": not settled: " + why
			}
		}
		pods, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: serviceSelector})
		if err != nil {
			t.Fatal(err)
		}
		var ready, reals []corev1.Pod
		for _, p := range pods.Items {
			if peerview.Ready(&p) {
				ready = append(ready, p)
				if p.Labels[realKey] == "true" {
					reals = append(reals, p)
				}
			}
		}
		switch {
		case len(ready) != want || len(pods.Items) != want:
			return fmt.Sprintf("%s: %d ready of %d pods, want %d", step, len(ready), len(pods.Items), want)
		case len(reals) != realReplicas:
			return fmt.Sprintf("%s: %d real replicas ready, want %d", step, len(reals), realReplicas)
		}
		expected := map[string][]string{}
		for _, self := range reals {
			others := make([]string, 0, len(ready))
			for _, p := range ready {
				if p.Name != self.Name {
					others = append(others, peerview.Format(p.Namespace, p.Name, p.Status.PodIP, peerPort))
				}
			}
			sort.Strings(others)
			expected[self.Name] = others
		}
		if d := peerview.Diff(expected, rt.ViewsOf(ctx, reals, "epp")); d != "" {
			return step + ": not converged: " + abbreviate(d)
		}
		seen = time.Now()
		return ""
	})
	t.Logf("%s: every real replica lists exactly the other %d ready pods", step, want-1)
	return seen
}

// peerChanges is each real replica's count of published peer upserts and deletes.
func peerChanges(t *testing.T, ctx context.Context, rt *podproc.Runtime) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, r := range rt.Replicas() {
		text, err := peerview.FetchMetrics(ctx, r.MetricsAddr)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(text, "\n") {
			// epp_peer_discovery_peer_upserts_total{discovery="endpointslice"} 1002
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			name, _, _ := strings.Cut(fields[0], "{")
			if name != "epp_peer_discovery_peer_upserts_total" && name != "epp_peer_discovery_peer_deletes_total" {
				continue
			}
			f, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			out[r.Pod] += f
		}
	}
	return out
}

// cpuTimes is each real replica's process CPU time so far (utime+stime).
func cpuTimes(t *testing.T, rt *podproc.Runtime) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, r := range rt.Replicas() {
		p := r.Process("epp")
		if p == nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[r.Pod] = time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}

func report(t *testing.T, step string, done, start time.Time, before, after map[string]time.Duration) {
	var cpu []string
	for pod, a := range after {
		cpu = append(cpu, fmt.Sprintf("%s %v", pod, (a-before[pod]).Round(10*time.Millisecond)))
	}
	sort.Strings(cpu)
	line := fmt.Sprintf("e2e-scale: %s: converged after %v; CPU of each real replica meanwhile: %s",
		step, done.Sub(start).Round(100*time.Millisecond), strings.Join(cpu, ", "))
	t.Log(line)
}

func helm(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), append(args, "--kubeconfig", cluster.Kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func abbreviate(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}
