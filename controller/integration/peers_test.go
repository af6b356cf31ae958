package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

func selfEnv(ns string) map[string]string {
	return map[string]string{"NAMESPACE": ns, "POD_NAME": "epp-0", "POD_IP": "10.0.0.1", "POD_IPS": "10.0.0.1,fd00::1"}
}

// TestPeersFollowSliceChurn drives one replica's peer set through creates, updates
// and deletes of real EndpointSlices and checks the store and /debug/peers after each.
func TestPeersFollowSliceChurn(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "churn", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, selfEnv(ns))
	slicesAPI := env.Clientset.DiscoveryV1().EndpointSlices(ns)

	expect := func(step string, want ...string) {
		t.Helper()
		if want == nil {
			want = []string{}
		}
		wait.For(t, 10*time.Second, func() string {
			if diff := cmp.Diff(want, peerIDs(a.Store.Peers())); diff != "" {
				return fmt.Sprintf("%s: peers (-want +got):\n%s", step, diff)
			}
			return ""
		})
	}

	// Ready with no slice at all: synced does not wait for a slice to exist.
	wait.For(t, 10*time.Second, func() string {
		if code, body := get(t, a.ProbeAddr(), "/readyz"); code != http.StatusOK {
			return fmt.Sprintf("readyz %d %s", code, body)
		}
		return ""
	})
	doc, err := debugPeers(t, a.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if !doc.Enabled || doc.Source != "endpointslice" || doc.Synced == nil || !*doc.Synced || doc.Peers == nil || len(doc.Peers) != 0 {
		t.Fatalf("document before any slice: %+v", doc)
	}

	s4 := slicegen.Slice("epp-v4", slicegen.Namespace(ns),
		slicegen.Ports("http", 9002, "peer-sync", 9005),
		slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3"))
	created, err := slicesAPI.Create(ctx, &s4, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("create", ns+"/epp-1@10.0.0.2:9005", ns+"/epp-2@10.0.0.3:9005")

	// The same pods in an IPv6 slice (dual stack): still one peer each, IPv4 like self.
	s6 := slicegen.Slice("epp-v6", slicegen.Namespace(ns), slicegen.IPv6(),
		slicegen.Pod("epp-0", "fd00::1"), slicegen.Pod("epp-1", "fd00::2"), slicegen.Pod("epp-3", "fd00::4"))
	if _, err := slicesAPI.Create(ctx, &s6, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("dual stack", ns+"/epp-1@10.0.0.2:9005", ns+"/epp-2@10.0.0.3:9005", ns+"/epp-3@[fd00::4]:9005")

	// Port change.
	created.Ports[1].Port = ptr.To[int32](7005)
	if created, err = slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("port change", ns+"/epp-1@10.0.0.2:7005", ns+"/epp-2@10.0.0.3:7005", ns+"/epp-3@[fd00::4]:9005")

	// epp-2 NotReady.
	created.Endpoints[2].Conditions.Ready = ptr.To(false)
	if created, err = slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("not ready", ns+"/epp-1@10.0.0.2:7005", ns+"/epp-3@[fd00::4]:9005")

	// epp-1 terminating but still ready in the IPv4 slice; its IPv6 listing is
	// still ready and not terminating, so it stays, now through the IPv6 slice.
	created.Endpoints[1].Conditions.Terminating = ptr.To(true)
	if created, err = slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("terminating in one family", ns+"/epp-1@[fd00::2]:9005", ns+"/epp-3@[fd00::4]:9005")

	// Delete the IPv6 slice: epp-1 is terminating everywhere, epp-3 is gone.
	if err := slicesAPI.Delete(ctx, "epp-v6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("delete IPv6 slice")

	// /debug/peers follows the store and never lists self.
	created.Endpoints[1].Conditions.Terminating = ptr.To(false)
	if _, err = slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("ready again", ns+"/epp-1@10.0.0.2:7005")
	doc, err = debugPeers(t, a.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Peers) != 1 || doc.Peers[0].ID != ns+"/epp-1" || doc.Peers[0].Address != "10.0.0.2" || doc.Peers[0].Port != 7005 {
		t.Fatalf("/debug/peers peers = %+v", doc.Peers)
	}
	if doc.Self == nil || doc.Self.Name != "epp-0" || doc.Self.Namespace != ns || !slices.Equal(doc.Self.Addresses, []string{"10.0.0.1", "fd00::1"}) {
		t.Fatalf("/debug/peers self = %+v", doc.Self)
	}
	if doc.UpdatedAt == nil || time.Since(*doc.UpdatedAt) > time.Minute {
		t.Fatalf("/debug/peers updatedAt = %v", doc.UpdatedAt)
	}

	// Delete the last slice.
	if err := slicesAPI.Delete(ctx, "epp-v4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("delete all")
	_, body := get(t, a.MetricsAddr(), "/metrics")
	for _, m := range []string{`epp_peer_discovery_peers{discovery="endpointslice"} 0`, `epp_peer_discovery_synced{discovery="endpointslice"} 1`, "epp_peer_discovery_peer_upserts_total", "epp_peer_discovery_last_change_timestamp_seconds"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

// TestSliceWithoutNamedPortUsesDefault covers a Service without a peer-sync port,
// as seen mid-update of a chart that adds the port.
func TestSliceWithoutNamedPortUsesDefault(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "noport", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-port=9111"}, selfEnv(ns))
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Ports("http", 9002), slicegen.Pod("epp-1", "10.0.0.2"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() string {
		if got := peerIDs(a.Store.Peers()); !slices.Equal(got, []string{ns + "/epp-1@10.0.0.2:9111"}) {
			return fmt.Sprintf("peers %v", got)
		}
		return ""
	})
}

// TestChangeRightAfterReadyIsNotLost guards the moment between "ready" and the
// controller's event handler: a slice deleted right after the replica reports ready
// must still remove its peers. (An earlier version declared readiness from the
// informer alone and lost such an event.)
func TestChangeRightAfterReadyIsNotLost(t *testing.T) {
	ctx := context.Background()
	for i := range 3 {
		ns, err := env.CreateNamespace(ctx, fmt.Sprintf("ready-%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod("epp-1", "10.0.0.2"))
		if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a := startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, selfEnv(ns))
		// Act the moment the replica is ready (the first polls are a millisecond apart).
		wait.For(t, 10*time.Second, func() string {
			if err := a.Ready(); err != nil {
				return fmt.Sprintf("not ready: %v", err)
			}
			return ""
		})
		if n := len(a.Store.Peers()); n != 1 {
			t.Fatalf("ready with %d peers, want the 1 peer of the existing slice", n)
		}
		if err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "epp-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 10*time.Second, func() string {
			if n := len(a.Store.Peers()); n != 0 {
				return fmt.Sprintf("run %d: %d peers after the slice was deleted right after ready", i, n)
			}
			return ""
		})
	}
}

// TestPropagationDelay: a slice change carrying the EndpointSlice controller's
// endpoints.kubernetes.io/last-change-trigger-time is observed in
// epp_peer_discovery_propagation_delay_seconds, from that time to its publication.
func TestPropagationDelay(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "delay", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, selfEnv(ns))
	wait.For(t, 20*time.Second, func() string {
		if err := a.Ready(); err != nil {
			return err.Error()
		}
		return ""
	})
	before, sumBefore := histogramCountSum(t)
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod("epp-1", "10.0.0.2"))
	s.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": time.Now().Add(-300 * time.Millisecond).UTC().Format(time.RFC3339Nano)}
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The delay is observed just after the publication, so wait for both.
	wait.For(t, 10*time.Second, func() string {
		if n := len(a.Store.Peers()); n != 1 {
			return fmt.Sprintf("%d peers", n)
		}
		if count := histogramCount(t); count == before {
			return "the publication's delay is not observed yet"
		}
		return ""
	})
	count, sum := histogramCountSum(t)
	if observed := sum - sumBefore; count != before+1 || observed < 0.3 || observed > 10 {
		t.Fatalf("propagation delay histogram: count %d (was %d), the new observation %.3fs: want one more observation of 0.3 s to 10 s", count, before, observed)
	}
}

func histogramCount(t *testing.T) uint64 {
	c, _ := histogramCountSum(t)
	return c
}

func histogramCountSum(t *testing.T) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	h, ok := metrics.For(peers.SourceEndpointSlice).PropagationDelay.(prometheus.Metric)
	if !ok {
		t.Fatal("the propagation delay histogram is not a prometheus.Metric")
	}
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
