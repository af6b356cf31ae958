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
	ReasonStale     = "stale"     // the source became stale (see Stale)
)

// Results of a reachability probe, in the probes_total metric.
const (
	ProbeOK     = "ok"
	ProbeFailed = "failed"
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
	// Recompute times one update of the peer set from the source (one slice event,
	// a re-list, a file read).
	Recompute = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_recompute_duration_seconds",
		Help:    "Time to update the peer set from one source event (a slice event, a re-list, a file read).",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
	})
	// Stale is 1 while the peer view may be out of date (see the README's definition).
	Stale = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_stale",
		Help: "1 while the peer view may be out of date: its source cannot be read (the API server is unreachable or refuses the watch, or the peers file cannot be read); the last good set is kept.",
	})
	// StaleTransitions counts how often the view became stale, by cause.
	StaleTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_stale_total",
		Help: "Times the peer view became stale, by cause (refused, reset, timeout, tls, server-error, forbidden, unauthorized, read, parse, other).",
	}, []string{"reason"})
	// PropagationDelay is the time from an EndpointSlice change (its
	// endpoints.kubernetes.io/last-change-trigger-time) to its publication.
	PropagationDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_propagation_delay_seconds",
		Help:    "Time from the change that triggered an EndpointSlice update (its endpoints.kubernetes.io/last-change-trigger-time annotation, set by the EndpointSlice controller) to the moment the resulting peer change was published.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	// UnreachablePeers counts the peers whose last reachability probe failed
	// (--epp-peer-probe-interval; 0 with probing off).
	UnreachablePeers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_unreachable_peers",
		Help: "Peers whose last TCP probe of their peer-sync port failed (probing on, --epp-peer-probe-interval). They stay peers.",
	})
	// Probes counts reachability probes by result.
	Probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_probes_total",
		Help: "TCP probes of peers' peer-sync ports, by result (ok, failed).",
	}, []string{"result"})
	// ProbeConnect times the successful probe connections.
	ProbeConnect = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_probe_connect_seconds",
		Help:    "Time to open a TCP connection to a peer's peer-sync port, for probes that connected.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 10),
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Peers, Upserts, Deletes, Errors, Synced, LastChange, EndpointSlices, Recompute, Stale, StaleTransitions, PropagationDelay,
		UnreachablePeers, Probes, ProbeConnect)
	Probes.WithLabelValues(ProbeOK)
	Probes.WithLabelValues(ProbeFailed)
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
