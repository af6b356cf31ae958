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
		_, _ = w.Write(a.documentJSON())
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
// A synced replica stays ready when its view goes stale: an API server blip must
// never take every EPP replica out of its Service; /debug/peers and the
// epp_peer_discovery_stale gauge say it is stale instead.
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
	stale, since, reason, staleErr := a.pub.Stale()
	doc := peers.Document{
		Enabled: true,
		Source:  a.opts.PeerSource,
		Synced:  &synced,
		Self:    &peers.SelfDocument{Name: a.opts.Self.Name, Namespace: a.opts.PoolNamespace, Addresses: a.opts.Self.Strings()},
		Peers:   peers.Entries(snap.Peers),
		Stale:   &stale,
	}
	if stale {
		s := since.UTC()
		doc.StaleSince, doc.StaleReason = &s, reason
		if staleErr != nil {
			doc.LastError = staleErr.Error()
		}
	} else if err := a.pub.LastError(); err != nil && !synced {
		doc.LastError = err.Error()
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

// rendering is the /debug/peers document of one generation of the publisher.
type rendering struct {
	gen  uint64
	json []byte
}

// documentJSON is the /debug/peers document as served and written to the snapshot
// file, rendered once per change of the set or the status and then served from
// that rendering.
func (a *App) documentJSON() []byte {
	var gen uint64
	if a.pub != nil {
		gen, _ = a.pub.Generation()
	}
	if r := a.rendered.Load(); r != nil && r.gen == gen && (a.pub != nil || r.json != nil) {
		return r.json
	}
	b, err := json.MarshalIndent(a.Document(), "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encoding the peers document: %v", err)) // plain structs: cannot fail
	}
	b = append(b, '\n')
	a.rendered.Store(&rendering{gen: gen, json: b})
	return b
}
