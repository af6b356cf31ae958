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
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// status is what a peer source reports besides its peers.
type status interface {
	Synced() bool
	SyncedAt() time.Time
	LastError() error
}

// App is a running epp: a peer source feeding Store, and the HTTP endpoints.
type App struct {
	opts Options
	log  logr.Logger

	// Store holds the published peer set; Go code embedding the app reads it.
	Store *peers.MemoryPeerStore

	source  status
	mgr     manager.Manager
	file    *peerfile.Source
	metrics net.Listener
	probes  net.Listener
}

// New validates nothing (Parse did), creates the peer source and binds the two
// listeners. restConfig may be nil: it is then loaded from --kubeconfig, in-cluster
// config, $KUBECONFIG or ~/.kube/config, and only when the EndpointSlice source is on.
func New(opts Options, restConfig *rest.Config, log logr.Logger) (a *App, err error) {
	a = &App{opts: opts, log: log, Store: peers.NewMemoryPeerStore()}
	switch opts.Source() {
	case peers.SourceEndpointSlice:
		if restConfig == nil {
			if restConfig, err = loadRESTConfig(opts.Kubeconfig); err != nil {
				return nil, err
			}
		}
		cfg := peerset.Config{
			Namespace:   opts.PoolNamespace,
			Service:     opts.PeerService,
			PortName:    opts.PeerPortName,
			DefaultPort: int32(opts.PeerPort),
			Self:        opts.Self,
		}
		mgr, rec, err := endpointslice.NewManager(restConfig, cfg, a.Store, log)
		if err != nil {
			return nil, err
		}
		a.mgr, a.source = mgr, rec
	case peers.SourceFile:
		ns := opts.PoolNamespace
		if ns == "" {
			ns = "default"
		}
		a.file = peerfile.NewSource(opts.PeerFile, peerfile.Defaults{Namespace: ns, Port: int32(opts.PeerPort)},
			opts.Self, a.Store, log.WithName("peerfile"))
		a.source = a.file
	}
	if a.metrics, err = net.Listen("tcp", opts.MetricsAddr); err != nil {
		return nil, fmt.Errorf("--metrics-bind-address=%s: %w", opts.MetricsAddr, err)
	}
	if a.probes, err = net.Listen("tcp", opts.ProbeAddr); err != nil {
		a.metrics.Close()
		return nil, fmt.Errorf("--health-probe-bind-address=%s: %w", opts.ProbeAddr, err)
	}
	return a, nil
}

func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig=%s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API: not in a cluster and no --kubeconfig: %w", err)
	}
	return c, nil
}

// MetricsAddr is the bound address of /metrics and /debug/peers.
func (a *App) MetricsAddr() string { return a.metrics.Addr().String() }

// ProbeAddr is the bound address of /healthz and /readyz.
func (a *App) ProbeAddr() string { return a.probes.Addr().String() }

// Cache is the manager's cache with the EndpointSlice source, else nil.
func (a *App) Cache() cache.Cache {
	if a.mgr == nil {
		return nil
	}
	return a.mgr.GetCache()
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
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(shutdown)
		})
	}
	metrics.Synced.Set(0)
	metrics.Peers.Set(0)
	serve("metrics", a.metrics, a.metricsHandler())
	serve("probe", a.probes, a.probeHandler())
	if a.mgr != nil {
		g.Go(func() error { return a.mgr.Start(ctx) })
	}
	if a.file != nil {
		g.Go(func() error { return a.file.Run(ctx) })
	}
	if a.opts.SnapshotFile != "" {
		g.Go(func() error { return a.writeSnapshots(ctx) })
	}
	a.log.Info("epp started", "peerDiscovery", a.opts.EnablePeerDiscovery, "source", a.opts.Source(),
		"metrics", a.MetricsAddr(), "probes", a.ProbeAddr())
	return g.Wait()
}
