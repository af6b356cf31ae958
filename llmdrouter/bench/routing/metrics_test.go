package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// exposition is a replica's /metrics as the EPP writes it (the syncer's and the
// shared index's families, and the same families of another plugin instance,
// which the bench leaves out).
const exposition = `# TYPE epp_peer_sync_sent_bytes_total counter
epp_peer_sync_sent_bytes_total{syncer="peer-syncer"} 12345
# TYPE epp_shared_prefix_warm gauge
epp_shared_prefix_warm{plugin="shared-prefix"} 1
epp_shared_prefix_warm{plugin="other"} 0
# TYPE epp_shared_prefix_placements_total counter
epp_shared_prefix_placements_total{origin="local",plugin="shared-prefix"} 40
epp_shared_prefix_placements_total{origin="peer",plugin="shared-prefix"} 70
epp_shared_prefix_placements_total{origin="peer",plugin="other"} 1000
# TYPE epp_shared_prefix_repair_blocks_total counter
epp_shared_prefix_repair_blocks_total{direction="sent",plugin="shared-prefix"} 8
epp_shared_prefix_repair_blocks_total{direction="received",plugin="shared-prefix"} 5
# TYPE epp_shared_prefix_exchanges_total counter
epp_shared_prefix_exchanges_total{outcome="agreed",plugin="shared-prefix",role="opened"} 3
epp_shared_prefix_exchanges_total{outcome="agreed",plugin="shared-prefix",role="answered"} 4
# TYPE epp_shared_prefix_dropped_total counter
epp_shared_prefix_dropped_total{plugin="shared-prefix",reason="not-in-pool"} 2
epp_shared_prefix_dropped_total{plugin="shared-prefix",reason="other"} 1
# TYPE epp_shared_prefix_index_blocks gauge
epp_shared_prefix_index_blocks{plugin="shared-prefix"} 1296
# TYPE epp_shared_prefix_propagation_seconds histogram
epp_shared_prefix_propagation_seconds_bucket{plugin="shared-prefix",le="0.004"} 0
epp_shared_prefix_propagation_seconds_bucket{plugin="shared-prefix",le="0.008"} 10
epp_shared_prefix_propagation_seconds_bucket{plugin="shared-prefix",le="0.016"} 90
epp_shared_prefix_propagation_seconds_bucket{plugin="shared-prefix",le="0.032"} 100
epp_shared_prefix_propagation_seconds_bucket{plugin="shared-prefix",le="+Inf"} 100
epp_shared_prefix_propagation_seconds_sum{plugin="shared-prefix"} 1.1
epp_shared_prefix_propagation_seconds_count{plugin="shared-prefix"} 100
# TYPE epp_shared_prefix_placement_bytes histogram
epp_shared_prefix_placement_bytes_bucket{plugin="shared-prefix",le="64"} 20
epp_shared_prefix_placement_bytes_bucket{plugin="shared-prefix",le="128"} 40
epp_shared_prefix_placement_bytes_bucket{plugin="shared-prefix",le="+Inf"} 40
epp_shared_prefix_placement_bytes_sum{plugin="shared-prefix"} 3200
epp_shared_prefix_placement_bytes_count{plugin="shared-prefix"} 40
`

func TestScrapeMetricsReadsTheSharedIndex(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(exposition)) }))
	defer srv.Close()
	m, err := scrapeMetrics(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if m.sentBytes != 12345 || !m.hasWarm || m.warm != 1 || m.blocks != 1296 {
		t.Errorf("sent %v, warm %v %v, blocks %v; want 12345, 1, 1296", m.sentBytes, m.hasWarm, m.warm, m.blocks)
	}
	if m.merged["local"] != 40 || m.merged["peer"] != 70 || m.dropped != 3 || m.notInPool != 2 {
		t.Errorf("merged %v, dropped %v (not in pool %v); want local 40, peer 70, dropped 3 (2)", m.merged, m.dropped, m.notInPool)
	}
	if m.repairSent != 8 || m.repairReceived != 5 || m.exchanges["agreed"] != 7 {
		t.Errorf("repair blocks sent %v, received %v, exchanges %v; want 8, 5, agreed 7", m.repairSent, m.repairReceived, m.exchanges)
	}
	if m.placementBytes.count != 40 || m.placementBytes.mean() != 80 {
		t.Errorf("placements %v of %v bytes on average, want 40 of 80", m.placementBytes.count, m.placementBytes.mean())
	}
	// p50: rank 50 in (8 ms, 16 ms], 40 of its 80: 12 ms; p99: rank 99 in (16 ms, 32 ms], 9 of its 10.
	if est, bucket := m.propagation.quantile(0.5); math.Abs(est-0.012) > 1e-9 || bucket != 0.016 {
		t.Errorf("p50 %v (bucket %v), want 0.012 (0.016)", est, bucket)
	}
	if est, bucket := m.propagation.quantile(0.99); math.Abs(est-0.0304) > 1e-9 || bucket != 0.032 {
		t.Errorf("p99 %v (bucket %v), want 0.0304 (0.032)", est, bucket)
	}
	// A window: this reading less an earlier one, then two replicas together.
	earlier := m
	earlier.merged = map[string]float64{"peer": 60}
	earlier.propagation = m.propagation.scaled(0.5)
	w := m.sub(earlier)
	if w.merged["peer"] != 10 || w.propagation.count != 50 || w.sentBytes != 0 {
		t.Errorf("window: merged %v, %v propagations, sent %v; want peer 10, 50, 0", w.merged, w.propagation.count, w.sentBytes)
	}
	if both := m.add(m); both.propagation.count != 200 || both.merged["peer"] != 140 {
		t.Errorf("two replicas: %v propagations, merged %v", both.propagation.count, both.merged)
	}
	if est, _ := (histogram{}).quantile(0.99); !math.IsNaN(est) {
		t.Errorf("an empty histogram's p99: %v, want NaN", est)
	}
}
