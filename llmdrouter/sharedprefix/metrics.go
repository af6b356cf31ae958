package sharedprefix

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
)

// Label is the label of every metric that names the plugin instance.
const Label = "plugin"

var (
	blocksGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_index_blocks",
		Help: "Blocks in the shared prefix-cache index, every server together (bounded by the LRU capacity per server times the servers).",
	}, []string{Label})
	placements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_placements_total",
		Help: "Placements merged into the index, by origin: local (this replica's decisions), peer (a peer's), resent (a peer's, missed in a connection gap and sent again), snapshot (a part of a peer's index, at start), resync (a part of a peer's index, in place of placements missed and no longer kept).",
	}, []string{Label, "origin"})
	hitRatio = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_index_hit_ratio",
		Help:    "Per request routed, the share of its blocks that the index said the chosen server holds (upstream's llm_d_epp_prefix_indexer_hit_ratio, for this index).",
		Buckets: []float64{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0},
	}, []string{Label})
	capacityConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_capacity_conflicts_total",
		Help: "Peers' placements that gave a server another capacity than this replica's (its configuration or the server's metrics), which stays: a rollout that changes lruCapacityPerServer, or replicas that read the servers' metrics differently.",
	}, []string{Label})
	heldGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_held_blocks",
		Help: "Blocks of peers' placements held for an endpoint the pool does not list yet (merged when it does, dropped after a while).",
	}, []string{Label})
	placementBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_placement_bytes",
		Help:    "Bytes of a placement published to the peers: the server, 8 bytes per block hash new to it, and 10 for the touch of the blocks it held already.",
		Buckets: prometheus.ExponentialBuckets(32, 2, 12),
	}, []string{Label})
	propagation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_propagation_seconds",
		Help:    "From a peer's routing decision to its placement in this replica's index (by the two replicas' clocks); buckets of 5 ms from 10 to 50 ms, where the 50 ms target is decided.",
		Buckets: []float64{0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.045, 0.050, 0.060, 0.080, 0.100, 0.250, 0.500, 1, 2},
	}, []string{Label})
	dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_dropped_total",
		Help: "Peers' placements left out, by reason: not-in-pool (an endpoint this replica's pool did not list within the hold time), rate (a peer over its rate of block hashes), held-overflow (more held for endpoints not listed yet than the bound).",
	}, []string{Label, "reason"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(blocksGauge, placements, placementBytes, propagation, dropped, hitRatio, capacityConflicts, heldGauge)
}

// instanceMetrics are one plugin's metrics.
type instanceMetrics struct {
	blocks     prometheus.Gauge
	placements *prometheus.CounterVec
	// merged is placements' series of a peer's placement, by how it came (looked
	// up once: every merge counts).
	merged         map[peersync.MessageKind]prometheus.Counter
	placementBytes prometheus.Observer
	propagation    prometheus.Observer
	dropped        *prometheus.CounterVec
	hitRatio       prometheus.Observer
	conflicts      prometheus.Counter
	held           prometheus.Gauge
}

func metricsFor(name string) *instanceMetrics {
	l := prometheus.Labels{Label: name}
	m := &instanceMetrics{
		blocks:         blocksGauge.With(l),
		placements:     placements.MustCurryWith(l),
		placementBytes: placementBytes.With(l),
		propagation:    propagation.With(l),
		dropped:        dropped.MustCurryWith(l),
		hitRatio:       hitRatio.With(l),
		conflicts:      capacityConflicts.With(l),
		held:           heldGauge.With(l),
	}
	for _, o := range []string{"local", "peer", "resent", "snapshot", "resync"} {
		m.placements.WithLabelValues(o)
	}
	m.merged = map[peersync.MessageKind]prometheus.Counter{
		peersync.Live: m.placements.WithLabelValues("peer"), peersync.Resent: m.placements.WithLabelValues("resent"),
		peersync.Snapshot: m.placements.WithLabelValues("snapshot"), peersync.Resync: m.placements.WithLabelValues("resync"),
	}
	for _, r := range []string{"not-in-pool", "rate", "held-overflow"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Per peer, the blocks its live placements may add or touch: a token bucket.
const (
	// peerHashRate is the blocks a second that one peer's placements may add or
	// touch: 1,000 placements a second of 2,000 blocks each (a 128K-token prompt in
	// 64-token blocks).
	peerHashRate = 2_000_000
	// peerHashBurst is what it may add at once.
	peerHashBurst = 4 * maxHashesPerMessage
)

type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// allow takes n of peer's tokens, reporting whether it had them.
func (p *Plugin) allow(peer string, n int) bool {
	v, _ := p.limits.LoadOrStore(peer, &bucket{tokens: peerHashBurst, last: time.Now()})
	b := v.(*bucket)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(peerHashBurst, b.tokens+now.Sub(b.last).Seconds()*peerHashRate)
	b.last = now
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}
