// Package metrics holds the Prometheus metrics of peer discovery. They are
// registered with controller-runtime's registry, which /metrics serves.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Error reasons used in the errors_total metric.
const (
	ReasonForbidden = "forbidden" // missing RBAC for endpointslices
	ReasonWatch     = "watch"     // other list/watch failures
	ReasonList      = "list"      // reading the cache failed
	ReasonParse     = "parse"     // a peers file failed to parse or validate
	ReasonRead      = "read"      // a peers file could not be read
	ReasonSnapshot  = "snapshot"  // the snapshot file could not be written
)

var (
	// Peers is the number of peers in the published set.
	Peers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_peers",
		Help: "Number of peer replicas in the current peer set.",
	})
	// Upserts counts peers added or changed.
	Upserts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "epp_peer_discovery_peer_upserts_total",
		Help: "Peers added to or changed in the peer set.",
	})
	// Deletes counts peers removed.
	Deletes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "epp_peer_discovery_peer_deletes_total",
		Help: "Peers removed from the peer set.",
	})
	// Errors counts failures by reason.
	Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_errors_total",
		Help: "Peer discovery errors by reason (forbidden, watch, list, parse, read, snapshot).",
	}, []string{"reason"})
	// Synced is 1 once the peer source completed its initial list.
	Synced = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_synced",
		Help: "1 once the peer source completed its initial list (or read), else 0.",
	})
	// LastChange is the Unix time of the last change of the peer set.
	LastChange = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_last_change_timestamp_seconds",
		Help: "Unix time of the last change of the peer set.",
	})
	// EndpointSlices is the number of the Service's slices seen at the last recompute.
	EndpointSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_endpointslices",
		Help: "EndpointSlices in the process's cache at the last recompute (only the peer Service's slices are cached).",
	})
	// Recompute times one recomputation of the peer set.
	Recompute = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_recompute_duration_seconds",
		Help:    "Time to recompute the peer set from the source.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Peers, Upserts, Deletes, Errors, Synced, LastChange, EndpointSlices, Recompute)
	for _, r := range []string{ReasonForbidden, ReasonWatch, ReasonList, ReasonParse, ReasonRead, ReasonSnapshot} {
		Errors.WithLabelValues(r)
	}
}

// ObserveChange records a published change and the size of the new set.
func ObserveChange(c peers.Change, size int, now time.Time) {
	Peers.Set(float64(size))
	if c.Empty() {
		return
	}
	Upserts.Add(float64(len(c.Upserts)))
	Deletes.Add(float64(len(c.Deletes)))
	LastChange.Set(float64(now.UnixNano()) / 1e9)
}
