package fleetmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label is the label of every metric that names the plugin instance.
const Label = "plugin"

var (
	scrapes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_fleet_metrics_scrapes_total",
		Help: "Model servers' /metrics read by this replica, by why: owned (it owns the server and shares what it read), alone (no live peer runs the source, or share is off), takeover (the owner is live but sent nothing for the server within the TTL).",
	}, []string{Label, "mode"})
	scrapeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_fleet_metrics_scrape_errors_total",
		Help: "Scrapes that failed (upstream's llm_d_epp_datalayer_poll_errors_total counts them too).",
	}, []string{Label})
	shares = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_fleet_metrics_shares_total",
		Help: "Shares of a server's metrics: published (this replica's, to its peers), unshareable (too large to publish), and the peers' by outcome: applied (fed to the extractors), unknown-server (a server this replica's pool does not list yet), owned (this replica scrapes the server itself), not-owner (from a peer that does not own the server by this replica's view of the members: a view that lags, or a lie), older (no newer than the owner's last one).",
	}, []string{Label, "outcome"})
	shareBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_fleet_metrics_share_bytes",
		Help:    "Bytes of a share published: the server, the time and the families the extractors read, in Prometheus' text format.",
		Buckets: prometheus.ExponentialBuckets(128, 2, 10),
	}, []string{Label})
	shareAge = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_fleet_metrics_share_age_seconds",
		Help:    "How old a peer's share was when this replica applied it: from the owner's scrape to here (by the two replicas' clocks).",
		Buckets: []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1},
	}, []string{Label})
)

func init() {
	ctrlmetrics.Registry.MustRegister(scrapes, scrapeErrors, shares, shareBytes, shareAge)
}

// instanceMetrics are one plugin instance's series.
type instanceMetrics struct {
	scrapes      *prometheus.CounterVec
	scrapeErrors prometheus.Counter
	shares       *prometheus.CounterVec
	shareBytes   prometheus.Observer
	shareAge     prometheus.Observer
}

// metricsFor is the instance name's series, every one of them there from the
// start (at 0: a dashboard or an alert sees "none yet", not "no such series").
func metricsFor(name string) *instanceMetrics {
	l := prometheus.Labels{Label: name}
	m := &instanceMetrics{
		scrapes:      scrapes.MustCurryWith(l),
		scrapeErrors: scrapeErrors.With(l),
		shares:       shares.MustCurryWith(l),
		shareBytes:   shareBytes.With(l),
		shareAge:     shareAge.With(l),
	}
	for _, mode := range []string{modeOwned, modeAlone, modeTakeover} {
		m.scrapes.WithLabelValues(mode)
	}
	for _, o := range []string{"published", "unshareable", shareApplied, shareUnknown, shareOlder, shareOwned, shareNotOwner} {
		m.shares.WithLabelValues(o)
	}
	return m
}
