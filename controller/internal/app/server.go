package app

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

func (a *App) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	mux.Handle("GET /debug/peers", a.view)
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
