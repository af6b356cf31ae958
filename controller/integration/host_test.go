package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// seenNames is what a host controller reconciled.
type seenNames struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *seenNames) add(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[n] = true
}

func (s *seenNames) has(n string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[n]
}

// TestHostManager embeds EndpointSlice discovery in a host program that runs its own
// manager and watches Pods and ConfigMaps of its namespace, as an EPP does, under a
// ServiceAccount with namespaced Roles only, joined with SetupWithManager: the
// discovery keeps its own small cache (no change to the host). The host's reads keep
// working, the slice cache holds only the Service's slices among 1,000 others, and
// the peer part needs exactly the endpointslices Role: a missing Role leaves the host
// running while the peer part reports what is missing, and binding it makes the peer
// part ready without a restart.
func TestHostManager(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	createUnrelatedSlices(t, ns, 1000)
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns),
		slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "host-config"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "model-server-0", Labels: map[string]string{"app": "vllm"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The host's own Role: what an EPP needs for its model servers, nothing more.
	if _, err := env.Clientset.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "host"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.RbacV1().Roles(ns).Create(ctx, peerRole(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	sa := "own-cache"
	saConfig, err := env.ServiceAccountConfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	bind(t, ns, sa+"-host", "host", sa)

	cfg, err := endpointslice.Settings{Service: "epp", Namespace: ns}.Config(peers.Self{Name: "epp-0"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &capture.Buffer{}
	d := endpointslice.New(cfg, logs.Logger(), endpointslice.Options{Instance: "host-" + sa})
	mgr, err := ctrl.NewManager(saConfig, ctrl.Options{
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 logs.Logger().WithName("host"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The host's controllers: its Pods and ConfigMaps.
	seen := &seenNames{names: map[string]bool{}}
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}} {
		if err := hostController(mgr, sa, obj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	store := peers.NewMemoryPeerStore()
	wg.Go(func() {
		if err := mgr.Start(runCtx); err != nil {
			t.Errorf("host manager: %v", err)
		}
	})
	wg.Go(func() {
		if err := d.Start(runCtx, store); err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	defer func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("peer discovery logs:\n%s", logs.String())
		}
	}()

	// Without the endpointslices Role: the host works, the peer part says why not.
	wait.For(t, 30*time.Second, func() string {
		if !seen.has("host-config") || !seen.has("model-server-0") {
			return "the host's controllers have not seen their ConfigMap and Pod"
		}
		if err := d.Status().LastError(); err == nil || !strings.Contains(err.Error(), "endpointslices") || !strings.Contains(err.Error(), "forbidden") {
			return fmt.Sprintf("peer discovery without its Role reports %v, want the missing endpointslices permission", err)
		}
		return ""
	})
	select {
	case <-d.Ready():
		t.Fatal("ready without the endpointslices Role")
	default:
	}
	var cms corev1.ConfigMapList
	if err := mgr.GetClient().List(ctx, &cms, client.InNamespace(ns)); err != nil || len(cms.Items) == 0 {
		t.Fatalf("the host's own read failed while peer discovery lacks its Role: %v", err)
	}
	// Grant the peer Role: ready and peers, no restart.
	granted := time.Now()
	bind(t, ns, sa+"-peers", "epp-peer-discovery", sa)
	select {
	case <-d.Ready():
		t.Logf("ready %s after the RoleBinding", time.Since(granted).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatal("not ready 60s after the endpointslices RoleBinding was created")
	}
	// Ready means the host's notifier holds the initial set.
	if got := peerIDs(store.Peers()); strings.Join(got, ",") != ns+"/epp-1@10.0.0.2:9005,"+ns+"/epp-2@10.0.0.3:9005" {
		t.Fatalf("peers right after Ready: %v", got)
	}

	// The discovery holds only the Service's slice, among 1,000 others.
	if names := d.Slices(); strings.Join(names, ",") != ns+"/epp-a" {
		t.Fatalf("the discovery holds %d slices %v, want only %s/epp-a", len(names), names, ns)
	}

	// The host's controllers and reads keep working.
	wait.For(t, 10*time.Second, func() string {
		if !seen.has("host-config") || !seen.has("model-server-0") {
			return "the host's controllers have not seen their ConfigMap and Pod"
		}
		return ""
	})
	if err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "host-config"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("host read of its ConfigMap: %v", err)
	}
	var pods corev1.PodList
	if err := mgr.GetClient().List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "vllm"}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("host read of its Pods: %d, %v", len(pods.Items), err)
	}

	// And the peers follow changes.
	if err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "epp-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() string {
		if n := len(store.Peers()); n != 0 {
			return fmt.Sprintf("%d peers after the slice was deleted", n)
		}
		return ""
	})
}

// hostController registers a host controller for obj that notes what it reconciled.
func hostController(mgr ctrl.Manager, prefix string, obj client.Object, seen *seenNames) error {
	kind := fmt.Sprintf("%T", obj)
	return ctrl.NewControllerManagedBy(mgr).For(obj).Named(prefix + strings.ToLower(kind[strings.LastIndex(kind, ".")+1:])).
		Complete(reconcile.Func(func(_ context.Context, r reconcile.Request) (reconcile.Result, error) {
			seen.add(r.Name)
			return reconcile.Result{}, nil
		}))
}

// bind creates RoleBinding name binding Role role to ServiceAccount sa in ns.
func bind(t *testing.T, ns, name, role, sa string) {
	t.Helper()
	if _, err := env.Clientset.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
