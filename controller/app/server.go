package app

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

func (a *App) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/peers", func(w http.ResponseWriter, _ *http.Request) {
		b := a.documentJSON()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
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
	doc, ps := a.document()
	doc.Peers = peers.Entries(ps)
	for i := range doc.Peers {
		withProbe(&doc.Peers[i], a.probeStatus(ps[i].ID()))
	}
	return doc
}

// probeStatus is what the reachability probes found for a peer (zero with probing
// off, or before its first probe).
func (a *App) probeStatus(id string) reachability.Status {
	if a.prober == nil {
		return reachability.Status{}
	}
	st, _ := a.prober.Status(id)
	return st
}

// withProbe sets a document entry's reachability fields from st (none before the
// peer's first probe).
func withProbe(e *peers.PeerEntry, st reachability.Status) {
	if !st.Probed {
		return
	}
	reachable, at := st.Reachable, st.LastProbe.UTC()
	e.Reachable, e.LastProbe = &reachable, &at
	if st.Reachable {
		secs := st.ConnectTime.Seconds()
		e.ConnectSeconds = &secs
	} else {
		e.ProbeError = st.Error
	}
}

// document is the /debug/peers document without its peers, and the peers.
func (a *App) document() (peers.Document, []peers.PeerMetadata) {
	if !a.opts.EnablePeerDiscovery {
		return peers.DisabledDocument(), nil
	}
	snap := a.Store.Snapshot()
	synced := a.pub.Synced()
	stale, since, reason, staleErr := a.pub.Stale()
	doc := peers.Document{
		Enabled: true,
		Source:  a.opts.PeerSource,
		Synced:  &synced,
		Self:    &peers.SelfDocument{Name: a.opts.Self.Name, Namespace: a.opts.PoolNamespace, Addresses: a.opts.Self.Strings()},
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
	return doc, snap.Peers
}

// rendering is the /debug/peers document of one generation of the publisher and
// of the prober.
type rendering struct {
	gen  generation
	json []byte
}

type generation struct{ pub, probes uint64 }

func (a *App) generation() generation {
	var g generation
	if a.pub != nil {
		g.pub, _ = a.pub.Generation()
	}
	if a.prober != nil {
		g.probes, _ = a.prober.Generation()
	}
	return g
}

// documentJSON is the /debug/peers document as served and written to the snapshot
// file, rendered once per change of the set or the status (reusing the entries of
// unchanged peers) and then served from that rendering.
func (a *App) documentJSON() []byte {
	gen := a.generation()
	if r := a.rendered.Load(); r != nil && r.gen == gen {
		return r.json
	}
	a.renderMu.Lock()
	defer a.renderMu.Unlock()
	if r := a.rendered.Load(); r != nil && r.gen == gen {
		return r.json // rendered while this call waited
	}
	doc, ps := a.document()
	b := a.renderer.render(doc, ps, a.probeStatus)
	a.rendered.Store(&rendering{gen: gen, json: b})
	return b
}
