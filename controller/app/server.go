package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

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
	if a.pub == nil || a.pub.Synced() {
		return nil
	}
	if err := a.pub.LastError(); err != nil {
		return fmt.Errorf("peer discovery (%s) not synced: %w", a.opts.PeerSource, err)
	}
	return fmt.Errorf("peer discovery (%s) not synced yet", a.opts.PeerSource)
}

// Document is the current /debug/peers document.
func (a *App) Document() peers.Document {
	if !a.opts.EnablePeerDiscovery {
		return peers.DisabledDocument()
	}
	snap := a.Store.Snapshot()
	synced := a.pub.Synced()
	doc := peers.Document{
		Enabled: true,
		Source:  a.opts.PeerSource,
		Synced:  &synced,
		Self:    &peers.SelfDocument{Name: a.opts.Self.Name, Namespace: a.opts.PoolNamespace, Addresses: a.opts.Self.Strings()},
		Peers:   peers.Entries(snap.Peers),
	}
	updated := snap.UpdatedAt
	if updated.IsZero() {
		updated = a.pub.SyncedAt()
	}
	if !updated.IsZero() {
		u := updated.UTC()
		doc.UpdatedAt = &u
	}
	return doc
}
