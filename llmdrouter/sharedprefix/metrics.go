package sharedprefix

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label is the label of every metric that names the plugin instance.
const Label = "plugin"

var (
	blocksGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_index_blocks",
		Help: "Blocks in the shared prefix-cache index, every server together (at most epp_shared_prefix_index_capacity_blocks).",
	}, []string{Label})
	capacityGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_index_capacity_blocks",
		Help: "What the index may hold: every server's capacity (its LRU capacity here) together, the bound of its memory with the pool's servers.",
	}, []string{Label})
	indexBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_index_bytes",
		Help: "Memory of the index, estimated: about 90 bytes a block and 48 KiB a server (its digests).",
	}, []string{Label})
	serverBlocks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_server_blocks",
		Help: "Blocks of one server in the index.",
	}, []string{Label, "server"})
	serverDigest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_server_digest",
		Help: "A digest of one server's blocks and their stamps (the low 52 bits of /debug/shared-prefix's digest, exact in a float): replicas that hold the same for the server show the same value, once the traffic is quiet.",
	}, []string{Label, "server"})
	placements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_placements_total",
		Help: "Placements merged into the index, by origin: local (this replica's decisions), peer (a peer's, published live).",
	}, []string{Label, "origin"})
	hitRatio = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_index_hit_ratio",
		Help:    "Per request routed, the share of its blocks that the index said the chosen server holds (upstream's llm_d_epp_prefix_indexer_hit_ratio, for this index).",
		Buckets: []float64{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0},
	}, []string{Label})
	capacityConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_capacity_conflicts_total",
		Help: "Peers' placements, and exchanges, that gave a server another capacity than this replica's (its configuration or the server's metrics), which stays: a rollout that changes lruCapacityPerServer, or replicas that read the servers' metrics differently. Replicas that size a server differently do not compare it.",
	}, []string{Label})
	placementBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_placement_bytes",
		Help:    "Bytes of a placement published to the peers: the server, the time, and 8 bytes for each block hash of the request.",
		Buckets: prometheus.ExponentialBuckets(32, 2, 12),
	}, []string{Label})
	propagation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_shared_prefix_propagation_seconds",
		Help:    "From a peer's routing decision to its placement in this replica's index (by the two replicas' clocks); buckets of 5 ms from 10 to 50 ms, where the 50 ms target is decided.",
		Buckets: []float64{0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.045, 0.050, 0.060, 0.080, 0.100, 0.250, 0.500, 1, 2},
	}, []string{Label})
	dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_dropped_total",
		Help: "Peers' placements left out, by reason: not-in-pool (an endpoint this replica's pool does not list, or a pool not read yet; anti-entropy brings them once it does).",
	}, []string{Label, "reason"})
	exchanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_exchanges_total",
		Help: "Anti-entropy exchanges with a peer, by role (opened: by this replica; answered: by the peer) and outcome: agreed (nothing differed), repaired (blocks went one way or both), not-ready (the peer had not read its pool, or runs without anti-entropy), timeout (a step did not come in time), failed (the connection broke, or the peer sent what it should not).",
	}, []string{Label, "role", "outcome"})
	repairBlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_shared_prefix_repair_blocks_total",
		Help: "Blocks of anti-entropy's repairs, by direction: sent (to a peer, of the ranges that differed), received (from a peer, that changed this replica's index).",
	}, []string{Label, "direction"})
	disagreement = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_disagreement_seconds",
		Help: "The longest any peer has gone without an exchange with this replica that ended with both holding the same (since it was first seen, if never): about the anti-entropy interval when all is well. Alert when it stays above a few intervals.",
	}, []string{Label})
	warmGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_shared_prefix_warm",
		Help: "1 once an exchange with a peer completed (or there was no peer to compare with), 0 before.",
	}, []string{Label})
)

func init() {
	ctrlmetrics.Registry.MustRegister(blocksGauge, capacityGauge, indexBytes, serverBlocks, serverDigest, placements, placementBytes,
		propagation, dropped, hitRatio, capacityConflicts, exchanges, repairBlocks, disagreement, warmGauge)
}

// instanceMetrics are one plugin's metrics.
type instanceMetrics struct {
	name           string
	blocks         prometheus.Gauge
	capacity       prometheus.Gauge
	indexBytes     prometheus.Gauge
	serverBlocks   *prometheus.GaugeVec
	serverDigest   *prometheus.GaugeVec
	placements     *prometheus.CounterVec
	placementBytes prometheus.Observer
	propagation    prometheus.Observer
	dropped        *prometheus.CounterVec
	hitRatio       prometheus.Observer
	conflicts      prometheus.Counter
	exchanges      *prometheus.CounterVec
	repairBlocks   *prometheus.CounterVec
	disagreement   prometheus.Gauge
	warm           prometheus.Gauge
}

func metricsFor(name string) *instanceMetrics {
	l := prometheus.Labels{Label: name}
	m := &instanceMetrics{
		name:           name,
		blocks:         blocksGauge.With(l),
		capacity:       capacityGauge.With(l),
		indexBytes:     indexBytes.With(l),
		serverBlocks:   serverBlocks.MustCurryWith(l),
		serverDigest:   serverDigest.MustCurryWith(l),
		placements:     placements.MustCurryWith(l),
		placementBytes: placementBytes.With(l),
		propagation:    propagation.With(l),
		dropped:        dropped.MustCurryWith(l),
		hitRatio:       hitRatio.With(l),
		conflicts:      capacityConflicts.With(l),
		exchanges:      exchanges.MustCurryWith(l),
		repairBlocks:   repairBlocks.MustCurryWith(l),
		disagreement:   disagreement.With(l),
		warm:           warmGauge.With(l),
	}
	for _, o := range []string{"local", "peer"} {
		m.placements.WithLabelValues(o)
	}
	m.dropped.WithLabelValues("not-in-pool")
	for _, role := range []string{"opened", "answered"} {
		for _, o := range outcomes {
			m.exchanges.WithLabelValues(role, o)
		}
	}
	for _, d := range []string{"sent", "received"} {
		m.repairBlocks.WithLabelValues(d)
	}
	m.warm.Set(0)
	return m
}

// forgetServer drops the series of a server that left the pool.
func (m *instanceMetrics) forgetServer(server string) {
	m.serverBlocks.DeleteLabelValues(server)
	m.serverDigest.DeleteLabelValues(server)
}
