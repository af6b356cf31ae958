package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubeconfig"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// ShutdownTimeout bounds how long Run takes to return once its context ends.
const ShutdownTimeout = 5 * time.Second

// App is a running epp: a peer source feeding Store, and the HTTP endpoints.
type App struct {
	opts Options
	log  logr.Logger

	// Store holds the published peer set; Go code embedding the app reads it.
	Store *peers.MemoryPeerStore

	pub      *discovery.Publisher // nil with peer discovery off
	source   discovery.Source
	prober   *reachability.Prober // nil with probing off
	view     *debugpeers.View     // the /debug/peers document
	metrics  net.Listener
	probes   net.Listener
	peerSync net.Listener // nil without --peer-sync-bind-address
}

// New builds the peer source that opts.Source configured (the one place where the
// binary starts a source), and binds the listeners. restConfig may be nil: it is
// then loaded as described in kubeconfig.Load, and only for a source that talks
// to Kubernetes (SourceSpec.Permissions).
func New(opts Options, restConfig *rest.Config, log logr.Logger) (a *App, err error) {
	a = &App{opts: opts, log: log, Store: peers.NewMemoryPeerStore(), view: debugpeers.Disabled()}
	if opts.EnablePeerDiscovery {
		if err := a.buildSource(restConfig); err != nil {
			return nil, err
		}
	}
	if a.metrics, err = net.Listen("tcp", opts.MetricsAddr); err != nil {
		return nil, fmt.Errorf("--metrics-bind-address=%s: %w", opts.MetricsAddr, err)
	}
	if a.probes, err = net.Listen("tcp", opts.ProbeAddr); err != nil {
		a.metrics.Close()
		return nil, fmt.Errorf("--health-probe-bind-address=%s: %w", opts.ProbeAddr, err)
	}
	if opts.PeerSyncAddr != "" {
		if a.peerSync, err = net.Listen("tcp", opts.PeerSyncAddr); err != nil {
			a.metrics.Close()
			a.probes.Close()
			return nil, fmt.Errorf("--peer-sync-bind-address=%s: %w", opts.PeerSyncAddr, err)
		}
	}
	return a, nil
}

func (a *App) buildSource(restConfig *rest.Config) error {
	c := a.opts.Source
	if c == nil || c.Spec.Name != a.opts.PeerSource {
		return fmt.Errorf("peer source %q is not configured: build the options with Parse", a.opts.PeerSource)
	}
	name := c.Spec.Name
	var config *rest.Config
	if len(c.Spec.Permissions) > 0 { // loaded now, so that a missing one stops the start with one line
		var err error
		if restConfig != nil {
			config = kubeconfig.WithClientLimits(restConfig)
		} else if config, err = kubeconfig.Load(a.opts.Kubeconfig); err != nil {
			return fmt.Errorf("peer source %s: %w", name, err)
		}
	}
	loadConfig := func() (*rest.Config, error) {
		if config == nil {
			return nil, fmt.Errorf("peer source %s declares no permissions, so no Kubernetes client configuration was loaded", name)
		}
		return config, nil
	}
	log := a.log.WithName(name)
	a.pub = discovery.NewPublisher(name, a.Store, log, discovery.PublisherOptions{Self: a.opts.Self, Reasons: c.Spec.Reasons})
	src, err := c.New(a.pub, loadConfig, log)
	if err != nil {
		return fmt.Errorf("peer source %s: %w", name, err)
	}
	a.source = src
	if a.opts.ProbeInterval > 0 {
		if a.prober, err = reachability.New(reachability.Options{Interval: a.opts.ProbeInterval, Instance: name}, a.log.WithName("reachability")); err != nil {
			return fmt.Errorf("--epp-peer-probe-interval: %w", err)
		}
	}
	a.view = debugpeers.New(debugpeers.Options{Store: a.Store, Publisher: a.pub, Prober: a.prober,
		Self: peers.SelfDocument{Name: a.opts.Self.Name, Namespace: a.opts.PoolNamespace, Addresses: a.opts.Self.Strings()}})
	return nil
}

// MetricsAddr is the bound address of /metrics and /debug/peers.
func (a *App) MetricsAddr() string { return a.metrics.Addr().String() }

// ProbeAddr is the bound address of /healthz and /readyz.
func (a *App) ProbeAddr() string { return a.probes.Addr().String() }

// PeerSyncAddr is the bound address of --peer-sync-bind-address ("" without it).
func (a *App) PeerSyncAddr() string {
	if a.peerSync == nil {
		return ""
	}
	return a.peerSync.Addr().String()
}

// Run serves and runs the peer source until ctx ends or something fails.
func (a *App) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	serve := func(name string, l net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s server: %w", name, err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), ShutdownTimeout/2)
			defer cancel()
			if err := srv.Shutdown(shutdown); err != nil {
				_ = srv.Close() // a client that keeps a request open does not hold the exit
			}
			return nil
		})
	}
	serve("metrics", a.metrics, a.metricsHandler())
	serve("probe", a.probes, a.probeHandler())
	if a.source != nil {
		g.Go(func() error { return a.source.Run(ctx) })
	}
	if a.prober != nil {
		g.Go(func() error { return a.prober.Run(ctx, a.Store) })
	}
	if a.peerSync != nil {
		line := reachability.AnswerLine(a.opts.PoolNamespace + "/" + a.opts.Self.Name)
		g.Go(func() error {
			if err := reachability.Answer(ctx, a.peerSync, line); err != nil {
				return fmt.Errorf("--peer-sync-bind-address: %w", err)
			}
			return nil
		})
	}
	if a.opts.SnapshotFile != "" {
		g.Go(func() error { return a.view.WriteSnapshots(ctx, a.opts.SnapshotFile, a.log.WithName("snapshot")) })
	}
	kv := []any{"peerDiscovery", a.opts.EnablePeerDiscovery, "source", a.opts.PeerSource,
		"self", a.opts.Self.Name, "metrics", a.MetricsAddr(), "probes", a.ProbeAddr()}
	if a.opts.Source != nil {
		kv = append(kv, "settings", a.opts.Source.Summary())
	}
	if a.prober != nil {
		kv = append(kv, "probeInterval", a.opts.ProbeInterval.String())
	}
	if a.peerSync != nil {
		kv = append(kv, "peerSync", a.PeerSyncAddr())
	}
	a.log.Info("epp started", kv...)
	return g.Wait()
}
