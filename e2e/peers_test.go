//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gruntwork-io/terratest/modules/k8s"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/podproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

func TestPeerDiscovery(t *testing.T) {
	for _, ch := range channels() {
		for _, m := range ch.modes() {
			t.Run(ch.name()+"/"+string(m), func(t *testing.T) {
				ns := fmt.Sprintf("e2e-%s-%s-%s", ch.name(), m, rand.String(5))
				runCase(t, ch, ns, m)
			})
		}
	}
}

// createNamespace creates ns for the test, enforcing the restricted pod security
// level when restricted, and deletes it when the test ends.
func createNamespace(t *testing.T, ns string, restricted bool) {
	t.Helper()
	var labels map[string]string
	if restricted {
		labels = testenv.RestrictedPodSecurity()
	}
	if _, err := clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: labels,
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clientset.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

// runPods runs the local backend's pods of namespace ns selected by
// app.kubernetes.io/name=epp (podproc, as a kubelet would), until the test ends.
func runPods(t *testing.T, ns string) *podproc.Runtime {
	t.Helper()
	rt, err := podproc.New(local.Config, podproc.DefaultBinaries(repoRoot), ns, "app.kubernetes.io/name=epp", eppContainer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go rt.Run(ctx)
	t.Cleanup(func() { stop(); rt.Wait() })
	return rt
}

func runCase(t *testing.T, ch channel, ns string, m mode) {
	ctx := context.Background()
	w := ch.workload()
	if !ch.createsNamespace() {
		createNamespace(t, ns, ch.restricted())
	}
	v := newViewer(t, ns, w, m)
	t.Cleanup(v.close)
	uninstalled := false
	t.Cleanup(func() {
		if t.Failed() {
			report(t, ns, w, v)
		}
		if !uninstalled {
			ch.uninstall(t, ns)
		}
	})

	label := ch.name()
	if m == sidecar {
		label += "/sidecar"
	}
	step := func(name string, change func()) {
		t.Helper()
		start := time.Now()
		change()
		waitConverged(t, ctx, ns, w, v, m, name)
		took := time.Since(start)
		record("%-17s %-20s %6.2fs", label, name, took.Seconds())
		t.Logf("%s: converged in %s", name, took.Round(time.Millisecond))
	}

	if m != off {
		step("install (3)", func() { ch.install(t, ns, m, 3) })
		if h, ok := ch.(*helmChannel); ok {
			if backend == "kind" {
				out, err := h.test(t, ns)
				if err != nil {
					t.Fatalf("helm test: %v\n%s", err, out)
				}
				t.Logf("helm test passed:\n%s", out)
			} else {
				t.Log("helm test runs on kind only: the local backend's pods are processes on 127.0.0.1 behind fake pod IPs")
			}
		}
		if w.alive {
			checkStandbys(t, ctx, ns, w, v)
		}
		step("scale 3 -> 5", func() { ch.scale(t, ns, 5) })
		step("scale 5 -> 2", func() { ch.scale(t, ns, 2) })
		step("delete a pod", func() {
			s := read(t, ctx, ns, w)
			victim := s.Live[0].Name
			t.Logf("deleting pod %s", victim)
			if err := clientset.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitDeleting(t, ctx, ns, victim)
		})
	} else {
		ch.install(t, ns, off, 3)
		checkOff(t, ctx, ns, w, v)
	}

	if m != off {
		collectPropagation(ctx, t, ns, w, v, m)
	}
	ch.uninstall(t, ns)
	uninstalled = true
	waitNothingLeft(t, ctx, ns, ch.createsNamespace())
}

// propagation merges the epp_peer_discovery_propagation_delay_seconds histograms of
// the replicas alive at the end of each case (the EndpointSlice source's: epp, or the
// sidecar).
var propagation = struct {
	sync.Mutex
	h peerview.Histogram
}{h: peerview.Histogram{}}

func collectPropagation(ctx context.Context, t *testing.T, ns string, w workload, v viewer, m mode) {
	container := eppContainer
	if m == sidecar {
		container = sidecarContainer
	}
	s := read(t, ctx, ns, w)
	texts := v.metrics(ctx, t, s.Live, container)
	propagation.Lock()
	defer propagation.Unlock()
	for _, text := range texts {
		propagation.h.AddHistogram(text, "epp_peer_discovery_propagation_delay_seconds")
	}
}

func read(t *testing.T, ctx context.Context, ns string, w workload) peerview.State {
	t.Helper()
	s, err := readE(ctx, ns, w)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readE reads the workload's pods; with membership alive, every live pod is a
// member, ready or not.
func readE(ctx context.Context, ns string, w workload) (peerview.State, error) {
	member := peerview.Ready
	if w.alive {
		member = peerview.Alive
	}
	return peerview.ReadMembers(ctx, clientset, ns, w.deployment, w.selector, member)
}

// waitConverged polls (every 250 ms, at most 90 s) until the Deployment has settled
// and every live replica lists exactly the other live replicas: its epp, or in
// sidecar mode both its sidecar and the EPP container that reads the sidecar's file.
func waitConverged(t *testing.T, ctx context.Context, ns string, w workload, v viewer, m mode, step string) {
	t.Helper()
	wait.ForEvery(t, 90*time.Second, 250*time.Millisecond, func() string {
		s, err := readE(ctx, ns, w)
		switch {
		case err != nil:
			return step + ": " + err.Error()
		case !s.Settled():
			return fmt.Sprintf("%s: deployment not settled: %d desired, %d live, %d starting", step, s.Desired, len(s.Live), s.Others)
		}
		views := v.views(ctx, t, s.Live, eppContainer)
		if d := peerview.Diff(s.Expected(9005), views); d != "" {
			return step + ": " + d
		}
		if m != sidecar {
			t.Logf("%s:\n%s", step, peerview.Table(s, views))
			return ""
		}
		sidecars := v.views(ctx, t, s.Live, sidecarContainer)
		if d := peerview.Diff(s.Expected(9005), sidecars); d != "" {
			return step + ": sidecar: " + d
		}
		if d := sameSource(views, sidecars); d != "" {
			return step + ": " + d
		}
		t.Logf("%s (each EPP container's view is its sidecar's):\n%s", step, peerview.Table(s, views))
		return ""
	})
}

// sameSource checks that each EPP container read its peers from the file (source
// "file") and each sidecar from the EndpointSlices.
func sameSource(consumers, sidecars map[string]peerview.View) string {
	for name, c := range consumers {
		if c.Doc.Source != "file" || sidecars[name].Doc.Source != "endpointslice" {
			return fmt.Sprintf("%s: EPP container source %q, sidecar source %q", name, c.Doc.Source, sidecars[name].Doc.Source)
		}
	}
	return ""
}

// waitDeleting waits until the pod is being deleted (or gone): from then on it is no
// replica, although llm-d-router's EPP may drain in it for 30 s more.
func waitDeleting(t *testing.T, ctx context.Context, ns, pod string) {
	t.Helper()
	wait.ForEvery(t, 60*time.Second, 200*time.Millisecond, func() string {
		p, err := clientset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			return ""
		}
		return fmt.Sprintf("pod %s not being deleted since its deletion", pod)
	})
}

// checkOff: llm-d-router's EPP runs (its /metrics answers) without the plugin: no
// epp_peer_discovery metrics, no plugin in its configuration, no peer env or
// ports, and its ServiceAccount may not read endpointslices.
func checkOff(t *testing.T, ctx context.Context, ns string, w workload, v viewer) {
	t.Helper()
	var s peerview.State
	var texts []string
	wait.ForEvery(t, 90*time.Second, 250*time.Millisecond, func() string {
		if s = read(t, ctx, ns, w); !s.Settled() {
			return "the deployment has not settled"
		}
		if texts = v.metrics(ctx, t, s.Live, eppContainer); len(texts) != len(s.Live) {
			return fmt.Sprintf("%d of %d replicas serve /metrics", len(texts), len(s.Live))
		}
		return ""
	})
	for _, text := range texts {
		if strings.Contains(text, "epp_peer_discovery_") {
			t.Fatalf("peer discovery off, yet the EPP's /metrics has epp_peer_discovery series")
		}
	}
	for _, p := range s.Live {
		c := p.Spec.Containers[0]
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "EPP_PEER") {
				t.Fatalf("pod %s has env %s with peer discovery off", p.Name, e.Name)
			}
		}
		for _, port := range c.Ports {
			if port.Name == "peer-sync" || port.Name == "http-peers" {
				t.Fatalf("pod %s has the port %s with peer discovery off", p.Name, port.Name)
			}
		}
	}
	cms, err := clientset.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for key, data := range cm.Data {
			if strings.Contains(data, "peer-discovery") {
				t.Fatalf("peer discovery off, yet ConfigMap %s key %s names a peer-discovery plugin:\n%s", cm.Name, key, data)
			}
		}
	}
	for _, verb := range []string{"get", "list", "watch"} {
		sar, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + w.serviceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "discovery.k8s.io", Resource: "endpointslices"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Fatalf("peer discovery off, yet ServiceAccount %s may %s endpointslices (%s)", w.serviceAccount, verb, sar.Status.Reason)
		}
	}
	t.Logf("off: %d replicas of llm-d-router's EPP serve /metrics, none with peer discovery", len(texts))
}

// checkStandbys: with leader election (upstream's default) and membership alive,
// the standbys are peers. On kind exactly one replica is ready (the leader; its
// readiness is the real gRPC probe) and every replica lists the others, ready or
// not; on the local backend KWOK reports every pod ready, so only the peer sets
// are checked there (the llm-d-router integration tests run real leader election).
func checkStandbys(t *testing.T, ctx context.Context, ns string, w workload, v viewer) {
	t.Helper()
	if backend != "kind" {
		t.Log("leader election: the local backend's pods are all ready (KWOK); the standbys' readiness is checked on kind")
		return
	}
	wait.ForEvery(t, 90*time.Second, 250*time.Millisecond, func() string {
		s := read(t, ctx, ns, w)
		ready := 0
		for i := range s.Live {
			if peerview.Ready(&s.Live[i]) {
				ready++
			}
		}
		if ready != 1 || !s.Settled() {
			return fmt.Sprintf("leader election: %d of %d replicas ready, want exactly 1 (the leader)", ready, len(s.Live))
		}
		if d := peerview.Diff(s.Expected(9005), v.views(ctx, t, s.Live, eppContainer)); d != "" {
			return "leader election: the standbys are not listed as peers: " + d
		}
		t.Logf("leader election: 1 leader ready, %d standbys not ready, and every replica lists all the others", len(s.Live)-1)
		return ""
	})
}

// waitNothingLeft waits until the namespace holds none of the objects the channel
// made (or, when the channel owns the namespace, until the namespace is gone).
func waitNothingLeft(t *testing.T, ctx context.Context, ns string, ownsNamespace bool) {
	t.Helper()
	wait.ForEvery(t, 2*time.Minute, 500*time.Millisecond, func() string {
		if left := leftovers(ctx, ns, ownsNamespace); len(left) > 0 {
			return fmt.Sprintf("after uninstall, left behind in %s: %v", ns, left)
		}
		return ""
	})
}

func leftovers(ctx context.Context, ns string, ownsNamespace bool) []string {
	if ownsNamespace {
		if _, err := clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return []string{"namespace " + ns}
		}
		return nil
	}
	return testenv.Leftovers(ctx, clientset, ns)
}

// report prints what a person needs to see why a case failed.
func report(t *testing.T, ns string, w workload, v viewer) {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "\n===== diagnostics for namespace %s =====\n", ns)
	if pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s phase=%s ip=%s ready=%v deleting=%v\n", p.Name, p.Status.Phase, p.Status.PodIP, peerview.Ready(&p), p.DeletionTimestamp != nil)
		}
		s, _ := readE(ctx, ns, w)
		for _, c := range []string{eppContainer, sidecarContainer} {
			for name, view := range v.views(ctx, t, s.Live, c) {
				fmt.Fprintf(&b, "--- %s container %s /debug/peers: %+v err=%v\n", name, c, view.Doc, view.Err)
			}
		}
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "--- logs of %s:\n%s\n", p.Name, v.logs(t, p.Name))
		}
	}
	if out, err := k8s.RunKubectlAndGetOutputContextE(t, context.Background(), kubectlOptions(ns), "get", "events", "--sort-by=.lastTimestamp"); err == nil {
		fmt.Fprintf(&b, "--- events:\n%s\n", out)
	}
	if local != nil {
		fmt.Fprintf(&b, "--- control plane:\n%s", local.Logs(15))
	}
	t.Log(b.String())
}
