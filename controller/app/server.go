package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

func init() {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		_ = ctrlmetrics.Registry.Register(c) // already registered by another user of the registry: fine
	}
}

func (a *App) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/peers", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Document())
	})
	return mux
}

func (a *App) probeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Ready returns nil once the peer source has synced (always, with peer discovery off).
func (a *App) Ready() error {
	if a.source == nil || a.source.Synced() {
		return nil
	}
	if err := a.source.LastError(); err != nil {
		return fmt.Errorf("peer discovery (%s) not synced: %w", a.opts.Source(), err)
	}
	return fmt.Errorf("peer discovery (%s) not synced yet", a.opts.Source())
}

// Document is the current /debug/peers document.
func (a *App) Document() peers.Document {
	if !a.opts.EnablePeerDiscovery {
		return peers.DisabledDocument()
	}
	snap := a.Store.Snapshot()
	synced := a.source.Synced()
	doc := peers.Document{
		Enabled: true,
		Source:  a.opts.Source(),
		Synced:  &synced,
		Self:    &peers.SelfDocument{Name: a.opts.Self.Name, Namespace: a.opts.PoolNamespace, Addresses: []string{}},
		Peers:   peers.Entries(snap.Peers),
	}
	for _, addr := range a.opts.Self.Addresses {
		doc.Self.Addresses = append(doc.Self.Addresses, addr.String())
	}
	updated := snap.UpdatedAt
	if updated.IsZero() {
		updated = a.source.SyncedAt()
	}
	if !updated.IsZero() {
		u := updated.UTC()
		doc.UpdatedAt = &u
	}
	return doc
}
