package integration_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

// TestTwoDiscoveriesKeepTheirMetricsApart: two EndpointSlice discoveries in one
// process (two plugin instances in one EPP, or two Go callers), on two Services of
// different sizes, each with its own instance name, and then each without one. What
// the process's /metrics registry serves for each is its own: peers, upserts and the
// recompute histogram, which has samples of the initial list as soon as the
// discovery is ready (no slice changed since).
func TestTwoDiscoveriesKeepTheirMetricsApart(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "twometrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		svc, slice string
		opts       []slicegen.SliceOption
	}{
		{"alpha", "alpha-a", []slicegen.SliceOption{slicegen.Service("alpha"), slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3")}},
		{"beta", "beta-a", []slicegen.SliceOption{slicegen.Service("beta"), slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("other-1", "10.0.1.2")}},
	} {
		sl := slicegen.Slice(s.slice, append(s.opts, slicegen.Namespace(ns))...)
		if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Instance names unique to this run: the registry is the process's.
	for _, named := range []bool{true, false} {
		t.Run(map[bool]string{true: "named", false: "unnamed"}[named], func(t *testing.T) {
			runCtx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			want := map[string]float64{}
			for _, d := range []struct {
				svc   string
				peers float64
			}{{"alpha", 2}, {"beta", 1}} {
				cfg, err := endpointslice.Settings{Service: d.svc, Namespace: ns}.Config(peers.Self{Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
				if err != nil {
					t.Fatal(err)
				}
				opts := endpointslice.Options{RESTConfig: env.Config}
				if named {
					opts.Instance = d.svc + "-" + ns
				}
				disc := endpointslice.New(cfg, logr.Discard(), opts)
				instance := disc.Publisher().Metrics().Instance()
				if _, dup := want[instance]; dup {
					t.Fatalf("two discoveries labelled discovery=%q", instance)
				}
				want[instance] = d.peers
				store := peers.NewMemoryPeerStore()
				wg.Go(func() {
					if err := disc.Start(runCtx, store); err != nil {
						t.Errorf("%s: Start: %v", instance, err)
					}
				})
				select {
				case <-disc.Ready():
				case <-time.After(30 * time.Second):
					t.Fatalf("%s not ready within 30 s", instance)
				}
				// Right at Ready, before any event: the initial list was timed.
				if n := gatheredHistogramCount(t, "epp_peer_discovery_recompute_duration_seconds", instance); n == 0 {
					t.Errorf("%s: ready with no recompute observed: the initial list is not timed", instance)
				}
			}
			for instance, want := range want {
				m := metrics.For(instance)
				if got := testutil.ToFloat64(m.Peers); got != want {
					t.Errorf("epp_peer_discovery_peers{discovery=%q} = %v, want %v", instance, got, want)
				}
				// An unnamed discovery's name may have served another test of the
				// process before: its counters are not this test's alone.
				if got := testutil.ToFloat64(m.Upserts); named && got != want {
					t.Errorf("epp_peer_discovery_peer_upserts_total{discovery=%q} = %v, want %v", instance, got, want)
				}
				if got := testutil.ToFloat64(m.Synced); got != 1 {
					t.Errorf("epp_peer_discovery_synced{discovery=%q} = %v, want 1", instance, got)
				}
			}
		})
	}
}

// gatheredHistogramCount is the sample count of histogram name{discovery=instance} as the
// process's metrics registry (what /metrics serves) gathers it.
func gatheredHistogramCount(t *testing.T, name, instance string) uint64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, metrics.Label) == instance {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
