// Package metrics holds the Prometheus metrics of peer discovery. They are
// registered with controller-runtime's registry, which the epp binary's /metrics and
// an EPP built on controller-runtime serve.
//
// Every metric of a discovery carries the label discovery=<its instance name> (the
// source's name in the epp binary, the plugin's name in an EPP), so that two
// discoveries in one process never overwrite each other's figures. For returns the
// metrics of one discovery.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Failure reasons shared by sources and the binary, in the errors_total metric. A
// source declares the reasons it reports (discovery.SourceSpec.Reasons); the API
// server checks add the causes of Classify (refused, reset, timeout, tls,
// server-error, unauthorized, other).
const (
	ReasonForbidden = "forbidden" // missing RBAC for endpointslices
	ReasonWatch     = "watch"     // a list or watch of the slices failed
	ReasonParse     = "parse"     // a peers file failed to parse or validate
	ReasonRead      = "read"      // a peers file could not be read
	ReasonSnapshot  = "snapshot"  // the snapshot file could not be written
)

// Results of a reachability probe, in the probes_total metric.
const (
	ProbeOK     = "ok"
	ProbeFailed = "failed"
)

// Label is the label that names the discovery instance.
const Label = "discovery"

var (
	peersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_peers",
		Help: "Number of peer replicas in the current peer set.",
	}, []string{Label})
	upserts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_peer_upserts_total",
		Help: "Peers added to or changed in the peer set.",
	}, []string{Label})
	deletes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_peer_deletes_total",
		Help: "Peers removed from the peer set.",
	}, []string{Label})
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_errors_total",
		Help: "Peer discovery errors by reason (forbidden, watch, parse, read, lookup, snapshot, and the API server check causes refused, reset, timeout, tls, server-error, unauthorized, other).",
	}, []string{Label, "reason"})
	synced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_synced",
		Help: "1 once the peer source completed its initial list (or read), else 0.",
	}, []string{Label})
	lastChange = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_last_change_timestamp_seconds",
		Help: "Unix time of the last change of the peer set.",
	}, []string{Label})
	endpointSlices = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_endpointslices",
		Help: "EndpointSlices the EndpointSlice source holds (only the peer Service's slices reach it).",
	}, []string{Label})
	recompute = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_recompute_duration_seconds",
		Help:    "Time to update the peer set from one source event: a slice event or a re-list (the initial list included), a parsed peers file, a DNS answer. Reading the file or asking DNS is not included.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
	}, []string{Label})
	stale = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_stale",
		Help: "1 while the peer view may be out of date: its source cannot be read (the API server is unreachable or refuses the watch, the peers file cannot be read, DNS does not answer); the last good set is kept.",
	}, []string{Label})
	staleTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_stale_total",
		Help: "Times the peer view became stale, by cause (refused, reset, timeout, tls, server-error, forbidden, unauthorized, watch, read, parse, lookup, other).",
	}, []string{Label, "reason"})
	propagationDelay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_propagation_delay_seconds",
		Help:    "Time from the change that triggered an EndpointSlice update (its endpoints.kubernetes.io/last-change-trigger-time annotation, set by the EndpointSlice controller) to the moment the resulting peer change was published.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{Label})

	unreachablePeers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_discovery_unreachable_peers",
		Help: "Peers whose last TCP probe of their peer-sync port failed (probing on, --epp-peer-probe-interval). They stay peers.",
	}, []string{Label})
	probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_discovery_probes_total",
		Help: "TCP probes of peers' peer-sync ports, by result (ok, failed).",
	}, []string{Label, "result"})
	probeConnect = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_peer_discovery_probe_connect_seconds",
		Help:    "Time to open a TCP connection to a peer's peer-sync port, for probes that connected.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 10),
	}, []string{Label})
)

func init() {
	ctrlmetrics.Registry.MustRegister(peersGauge, upserts, deletes, errorsTotal, synced, lastChange, endpointSlices, recompute, stale, staleTransitions, propagationDelay,
		unreachablePeers, probes, probeConnect)
}

// Probing is the reachability metrics of one discovery instance; they exist (at 0)
// from ProbingFor on, so a program that does not probe exports none of them.
type Probing struct {
	Unreachable    prometheus.Gauge
	OK, Failed     prometheus.Counter
	ConnectSeconds prometheus.Observer
}

// ProbingFor returns the reachability metrics of the discovery named instance.
func ProbingFor(instance string) *Probing {
	return &Probing{
		Unreachable:    unreachablePeers.WithLabelValues(instance),
		OK:             probes.WithLabelValues(instance, ProbeOK),
		Failed:         probes.WithLabelValues(instance, ProbeFailed),
		ConnectSeconds: probeConnect.WithLabelValues(instance),
	}
}

// Discovery is the metrics of one discovery instance: every series carries its
// label. The zero value is not usable; call For.
type Discovery struct {
	instance string

	Peers, Synced, LastChange, EndpointSlices, Stale prometheus.Gauge
	Upserts, Deletes                                 prometheus.Counter
	Recompute, PropagationDelay                      prometheus.Observer
}

// For returns the metrics of the discovery named instance, with the series of
// reasons created at 0 (so that a rate() over them starts from the first scrape).
func For(instance string, reasons ...string) *Discovery {
	d := &Discovery{
		instance:         instance,
		Peers:            peersGauge.WithLabelValues(instance),
		Synced:           synced.WithLabelValues(instance),
		LastChange:       lastChange.WithLabelValues(instance),
		EndpointSlices:   endpointSlices.WithLabelValues(instance),
		Stale:            stale.WithLabelValues(instance),
		Upserts:          upserts.WithLabelValues(instance),
		Deletes:          deletes.WithLabelValues(instance),
		Recompute:        recompute.WithLabelValues(instance),
		PropagationDelay: propagationDelay.WithLabelValues(instance),
	}
	for _, r := range reasons {
		d.Errors(r)
	}
	return d
}

var (
	instancesMu sync.Mutex
	instances   = map[string]bool{}
)

// NewInstance returns an instance name that NewInstance never returned before in
// this process: base the first time, then base-2, base-3, ... For discoveries that
// were given no name of their own, so that two of them never share series.
func NewInstance(base string) string {
	instancesMu.Lock()
	defer instancesMu.Unlock()
	name := base
	for n := 2; instances[name]; n++ {
		name = base + "-" + strconv.Itoa(n)
	}
	instances[name] = true
	return name
}

// Reset sets the gauges of a discovery that starts: not synced, no peers, not stale.
func (d *Discovery) Reset() {
	d.Peers.Set(0)
	d.Synced.Set(0)
	d.Stale.Set(0)
}

// Instance is the discovery's label value.
func (d *Discovery) Instance() string { return d.instance }

// Errors is the errors_total counter of reason.
func (d *Discovery) Errors(reason string) prometheus.Counter { return Errors(d.instance, reason) }

// Errors is the errors_total counter of a discovery instance and reason, for a
// program without a discovery (peer discovery off) that still fails at something.
func Errors(instance, reason string) prometheus.Counter {
	return errorsTotal.WithLabelValues(instance, reason)
}

// StaleTransitions is the stale_total counter of reason.
func (d *Discovery) StaleTransitions(reason string) prometheus.Counter {
	return staleTransitions.WithLabelValues(d.instance, reason)
}

// ObserveChange records a published change and the size of the new set.
func (d *Discovery) ObserveChange(c peers.Change, size int, now time.Time) {
	d.Peers.Set(float64(size))
	if c.Empty() {
		return
	}
	d.Upserts.Add(float64(len(c.Upserts)))
	d.Deletes.Add(float64(len(c.Deletes)))
	d.LastChange.Set(float64(now.UnixNano()) / 1e9)
}
