package sharedprefix

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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
		Help: "Placements merged into the index, by origin: local (this replica's decisions), peer (a peer's), snapshot (a part of a peer's index, at start).",
	}, []string{Label, "origin"})
	placementBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_placement_bytes",
		Help:    "Bytes of a placement published to the peers: the server, and 8 bytes per block hash new to it.",
		Buckets: prometheus.ExponentialBuckets(32, 2, 12),
	}, []string{Label})
	propagation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_propagation_seconds",
		Help:    "From a peer's routing decision to its placement in this replica's index (by the two replicas' clocks).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
	}, []string{Label})
	dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_dropped_total",
		Help: "Peers' placements left out, by reason: not-in-pool (an endpoint this replica's pool does not have), rate (a peer over its rate of block hashes).",
	}, []string{Label, "reason"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(blocksGauge, placements, placementBytes, propagation, dropped)
}

// instanceMetrics are one plugin's metrics.
type instanceMetrics struct {
	blocks         prometheus.Gauge
	placements     *prometheus.CounterVec
	placementBytes prometheus.Observer
	propagation    prometheus.Observer
	dropped        *prometheus.CounterVec
}

func metricsFor(name string) *instanceMetrics {
	l := prometheus.Labels{Label: name}
	m := &instanceMetrics{
		blocks:         blocksGauge.With(l),
		placements:     placements.MustCurryWith(l),
		placementBytes: placementBytes.With(l),
		propagation:    propagation.With(l),
		dropped:        dropped.MustCurryWith(l),
	}
	for _, o := range []string{"local", "peer", "snapshot"} {
		m.placements.WithLabelValues(o)
	}
	for _, r := range []string{"not-in-pool", "rate"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Per peer, the block hashes it may add to the index: a token bucket.
const (
	// peerHashRate is the block hashes a second one peer may add: 1,000 placements
	// a second of 2,000 new blocks each (a 128K-token prompt in 64-token blocks).
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
