package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// TestCacheHoldsOnlyTheServiceSlices proves the cache scoping: 1,000 slices of other
// Services in the same namespace, and slices of a Service with the same name in
// another namespace, never enter the process.
func TestCacheHoldsOnlyTheServiceSlices(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "scope", nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := env.CreateNamespace(ctx, "scope-other", nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(s discoveryv1.EndpointSlice) error {
		_, err := env.Clientset.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, &s, metav1.CreateOptions{})
		return err
	}
	// 1,000 slices of other Services.
	start := time.Now()
	createUnrelatedSlices(t, ns, 1000)
	t.Logf("created 1,000 unrelated slices in %s", time.Since(start).Round(time.Millisecond))
	for _, s := range []discoveryv1.EndpointSlice{
		slicegen.Slice("epp-elsewhere", slicegen.Namespace(other), slicegen.Pod("epp-9", "10.2.0.9")),
		slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod("epp-1", "10.0.0.2")),
		slicegen.Slice("epp-b", slicegen.Namespace(ns), slicegen.Pod("epp-2", "10.0.0.3")),
		slicegen.Slice("unlabelled", slicegen.Namespace(ns), slicegen.NoServiceLabel(), slicegen.Pod("epp-3", "10.0.0.4")),
	} {
		if err := create(s); err != nil {
			t.Fatal(err)
		}
	}

	a := startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, selfEnv(ns))
	wait.For(t, 20*time.Second, func() string {
		if err := a.Ready(); err != nil {
			return err.Error()
		}
		return ""
	})
	if got := peerIDs(a.Store.Peers()); strings.Join(got, ",") != ns+"/epp-1@10.0.0.2:9005,"+ns+"/epp-2@10.0.0.3:9005" {
		t.Fatalf("peers %v", got)
	}

	// Everything the process received, across all namespaces, is the Service's two
	// slices: the list and watch are scoped to the namespace and the label.
	held := metrics.For(peers.SourceEndpointSlice).EndpointSlices
	if got := testutil.ToFloat64(held); got != 2 {
		t.Fatalf("epp_peer_discovery_endpointslices = %v: the process holds other slices than the Service's 2", got)
	}

	// A slice of another Service created now does not arrive either.
	if err := create(slicegen.Slice("late-other", slicegen.Namespace(ns), slicegen.Service("svc-late"), slicegen.Pod("late", "10.3.0.1"))); err != nil {
		t.Fatal(err)
	}
	if err := create(slicegen.Slice("epp-c", slicegen.Namespace(ns), slicegen.Pod("epp-4", "10.0.0.5"))); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() string {
		if n := len(a.Store.Peers()); n != 3 {
			return fmt.Sprintf("%d peers, want 3 after epp-c", n)
		}
		return ""
	})
	if got := testutil.ToFloat64(held); got != 3 {
		t.Fatalf("epp_peer_discovery_endpointslices = %v after a late unrelated slice, want 3", got)
	}
}

// createUnrelatedSlices creates n slices of 50 other Services in ns, with 8 workers.
func createUnrelatedSlices(t *testing.T, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				s := slicegen.Slice(fmt.Sprintf("other-%04d", i), slicegen.Namespace(ns),
					slicegen.Service(fmt.Sprintf("svc-%d", i%50)), slicegen.Pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)))
				_, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
