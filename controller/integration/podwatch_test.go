package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/podwatch"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// createPod creates pod name in ns with labels and a peer-sync container port, and
// gives it the status a kubelet would: ip, phase Running and Ready as ready says.
func createPod(t *testing.T, ns, name string, labels map[string]string, ip string, ready bool) {
	t.Helper()
	ctx := context.Background()
	p, err := env.Clientset.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "epp",
			Ports: []corev1.ContainerPort{{Name: "peer-sync", ContainerPort: 7000}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	setReady(p, ready)
	if _, err := env.Clientset.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
}

// markReady sets the Ready condition of pod name, as a kubelet does.
func markReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	ctx := context.Background()
	p, err := env.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady(p, ready)
	if _, err := env.Clientset.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPodSource runs the binary's wiring with --epp-peer-pod-selector under a real
// ServiceAccount token. Without a Role on pods it is not ready and names the missing
// permission; once bound it becomes ready without a restart, and its peers are the
// ready pods the selector selects (not itself, not another app's pods), at their
// peer-sync container port, following readiness and deletion.
func TestPodSource(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "pods", nil)
	if err != nil {
		t.Fatal(err)
	}
	epp := map[string]string{"app": "epp"}
	createPod(t, ns, "epp-0", epp, "10.0.0.1", true)
	createPod(t, ns, "epp-1", epp, "10.0.0.2", true)
	createPod(t, ns, "epp-2", epp, "10.0.0.3", false)
	createPod(t, ns, "vllm-0", map[string]string{"app": "vllm"}, "10.0.1.1", true)
	saConfig, err := env.ServiceAccountConfig(ctx, ns, "epp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "epp-peers"},
		Rules: podwatch.Permissions}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	forbidden := metrics.For(podwatch.SourceName).Errors(metrics.ReasonForbidden)
	before := testutil.ToFloat64(forbidden)
	a := startApp(t, saConfig, []string{"--enable-peer-discovery", "--epp-peer-pod-selector=app=epp"}, selfEnv(ns))
	wait.For(t, 20*time.Second, func() string {
		if testutil.ToFloat64(forbidden) <= before {
			return "no forbidden error counted"
		}
		return ""
	})
	code, body := get(t, a.ProbeAddr(), "/readyz")
	if want := fmt.Sprintf("missing RBAC: need get, list and watch on pods in namespace %q", ns); code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Fatalf("readyz without the Role: %d %q, want 503 with %q", code, body, want)
	}

	if _, err := env.Clientset.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "epp-peers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "epp-peers"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "epp", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peersAre := func(want string) func() string {
		return func() string {
			doc, err := debugPeers(t, a.MetricsAddr())
			if err != nil {
				return err.Error()
			}
			var got []string
			for _, p := range doc.Peers {
				got = append(got, p.ID+"@"+p.Address+":"+fmt.Sprint(p.Port))
			}
			if doc.Source != "pod" || doc.Synced == nil || !*doc.Synced || strings.Join(got, ",") != want {
				b, _ := json.Marshal(doc)
				return fmt.Sprintf("/debug/peers %s, want source pod, synced, peers %s", b, want)
			}
			return ""
		}
	}
	wait.For(t, 60*time.Second, peersAre(ns+"/epp-1@10.0.0.2:7000"))
	if code, body := get(t, a.ProbeAddr(), "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz once the Role is bound: %d %s", code, body)
	}
	markReady(t, ns, "epp-2", true)
	wait.For(t, 10*time.Second, peersAre(ns+"/epp-1@10.0.0.2:7000,"+ns+"/epp-2@10.0.0.3:7000"))
	if err := env.Clientset.CoreV1().Pods(ns).Delete(ctx, "epp-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, peersAre(ns+"/epp-2@10.0.0.3:7000"))
}

// TestPodSourceSaysWhetherItListsThisReplica: configured from plugin parameters as
// llm-d-router's EPP configures it, the pod source says whether this replica's own
// pod counts by the rule its peers apply to it (ready, by default; alive counts a
// not-ready one too), and follows its readiness.
func TestPodSourceSaysWhetherItListsThisReplica(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "podself", nil)
	if err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "epp-0", map[string]string{"app": "epp"}, "10.0.0.1", false)
	createPod(t, ns, "epp-1", map[string]string{"app": "epp"}, "10.0.0.2", true)
	for _, membership := range []string{"ready", "alive"} {
		t.Run(membership, func(t *testing.T) {
			vars := map[string]string{"NAMESPACE": ns, "POD_NAME": "epp-0", "POD_IP": "10.0.0.1"}
			params := map[string]json.RawMessage{"selector": json.RawMessage(`"app=epp"`), "membership": json.RawMessage(`"` + membership + `"`)}
			c, err := discovery.ConfigureParams(podwatch.Spec(), params, func(k string) string { return vars[k] }, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.PeerDiscovery("podself-"+membership+"-"+ns, logr.Discard(), func() (*rest.Config, error) { return env.Config, nil })
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.Start(runCtx, peers.NewMemoryPeerStore()) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
			}()
			listed := func(want bool) func() string {
				return func() string {
					if got, _ := d.SelfListed(); got != want || len(d.Peers().Peers()) != 1 {
						return fmt.Sprintf("self listed %v with %d peers, want %v with epp-1", got, len(d.Peers().Peers()), want)
					}
					return ""
				}
			}
			// Not ready: listed only by alive.
			wait.For(t, 30*time.Second, listed(membership == "alive"))
			markReady(t, ns, "epp-0", true)
			wait.For(t, 10*time.Second, listed(true))
			markReady(t, ns, "epp-0", false)
		})
	}
}
