package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// TestUnnamedDiscoveriesKeepTheirMetricsApart: two discoveries of one source in one
// process, neither given an instance name (two Go callers of endpointslice.New
// without Options.Instance, say), each get series of their own: what /metrics
// shows for one is never the other's.
func TestUnnamedDiscoveriesKeepTheirMetricsApart(t *testing.T) {
	start := func(list ...peers.PeerMetadata) *discovery.PeerDiscovery {
		d, err := discovery.NewPeerDiscovery("unnamed", logr.Discard(), discovery.PublisherOptions{},
			func(pub *discovery.Publisher) (discovery.Source, error) {
				return &listSource{pub: pub, list: list}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Start(ctx, peers.NewMemoryPeerStore()) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		})
		select {
		case <-d.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("not ready")
		}
		return d
	}
	one := start(peer("epp-1", "10.0.0.2"))
	three := start(peer("epp-1", "10.0.0.2"), peer("epp-2", "10.0.0.3"), peer("epp-3", "10.0.0.4"))
	a, b := one.Publisher().Metrics(), three.Publisher().Metrics()
	if a.Instance() == b.Instance() {
		t.Fatalf("both unnamed discoveries are labelled discovery=%q", a.Instance())
	}
	if got := testutil.ToFloat64(a.Peers); got != 1 {
		t.Errorf("epp_peer_discovery_peers{discovery=%q} = %v, want 1 (its own set, not the other's)", a.Instance(), got)
	}
	if got := testutil.ToFloat64(b.Peers); got != 3 {
		t.Errorf("epp_peer_discovery_peers{discovery=%q} = %v, want 3", b.Instance(), got)
	}
}
