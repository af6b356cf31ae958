package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// Client limits of the Kubernetes client: a replica lists and watches one
// Service's slices, a handful of requests per (re)connection, so these only bound a
// misbehaving loop.
const (
	clientQPS   = 5
	clientBurst = 10
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
	metrics  net.Listener
	probes   net.Listener
	peerSync net.Listener // nil without --peer-sync-bind-address

	rendered atomic.Pointer[rendering] // the /debug/peers document of one generation
	renderMu sync.Mutex                // serializes rendering
	renderer docRenderer               // guarded by renderMu
}

// New is NewWithSources with DefaultSources.
func New(opts Options, restConfig *rest.Config, log logr.Logger) (*App, error) {
	return NewWithSources(opts, restConfig, log, DefaultSources())
}

// NewWithSources builds the peer source that opts.PeerSource names in sources (the
// one place where the binary starts a source), and binds the two listeners.
// restConfig may be nil: it is then loaded as described in LoadRESTConfig, and only
// when the source needs Kubernetes.
func NewWithSources(opts Options, restConfig *rest.Config, log logr.Logger, sources Sources) (a *App, err error) {
	a = &App{opts: opts, log: log, Store: peers.NewMemoryPeerStore()}
	if opts.EnablePeerDiscovery {
		if err := a.buildSource(restConfig, sources); err != nil {
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

func (a *App) buildSource(restConfig *rest.Config, sources Sources) error {
	name := a.opts.PeerSource
	spec, ok := sources.lookup(name)
	if !ok {
		return fmt.Errorf("peer source %q is not registered", name)
	}
	loadConfig := func() (*rest.Config, error) {
		if restConfig != nil {
			return withClientLimits(restConfig), nil
		}
		return LoadRESTConfig(a.opts.Kubeconfig)
	}
	log := a.log.WithName(name)
	a.pub = discovery.NewPublisher(name, a.Store, log)
	src, err := spec.New(SourceDeps{Options: a.opts, Publisher: a.pub, RESTConfig: loadConfig, Log: log})
	if err != nil {
		return fmt.Errorf("peer source %s: %w", name, err)
	}
	a.source = src
	if a.opts.ProbeInterval > 0 {
		if a.prober, err = reachability.New(reachability.Options{Interval: a.opts.ProbeInterval}, a.log.WithName("reachability")); err != nil {
			return fmt.Errorf("--epp-peer-probe-interval: %w", err)
		}
	}
	return nil
}

// LoadRESTConfig loads the Kubernetes client configuration in controller-runtime's
// order: the kubeconfig file given (--kubeconfig), else $KUBECONFIG, else the
// in-cluster configuration, else ~/.kube/config (without a file, controller-runtime's
// loader does it). The client limits are set here, the one place for them.
func LoadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig=%s: %w", kubeconfig, err)
		}
		return withClientLimits(c), nil
	}
	c, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API: no --kubeconfig, $KUBECONFIG, in-cluster config or ~/.kube/config: %w", err)
	}
	return withClientLimits(c), nil
}

func withClientLimits(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = clientQPS, clientBurst
	c.UserAgent = "epp-peer-discovery"
	return c
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

// answerPeerSync accepts connections on the peer-sync address and answers each with
// one line naming this replica, then closes it: what a probe of another replica
// needs to find this one reachable. It is not the EPP's state sync.
func (a *App) answerPeerSync(ctx context.Context) error {
	go func() { <-ctx.Done(); a.peerSync.Close() }()
	line := []byte(fmt.Sprintf("epp-peer-discovery %s/%s\n", a.opts.PoolNamespace, a.opts.Self.Name))
	for {
		conn, err := a.peerSync.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("--peer-sync-bind-address: %w", err)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write(line)
		_ = conn.Close()
	}
}

// Slices returns the names of the EndpointSlices the source holds (nil for a
// source that reads no slices).
func (a *App) Slices() []string {
	if s, ok := a.source.(interface{ Slices() []string }); ok {
		return s.Slices()
	}
	return nil
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
	metrics.Synced.Set(0)
	metrics.Peers.Set(0)
	serve("metrics", a.metrics, a.metricsHandler())
	serve("probe", a.probes, a.probeHandler())
	if a.source != nil {
		g.Go(func() error { return a.source.Run(ctx) })
	}
	if a.prober != nil {
		g.Go(func() error { return a.prober.Run(ctx, a.Store) })
	}
	if a.peerSync != nil {
		g.Go(func() error { return a.answerPeerSync(ctx) })
	}
	if a.opts.SnapshotFile != "" {
		g.Go(func() error { return a.writeSnapshots(ctx) })
	}
	kv := []any{"peerDiscovery", a.opts.EnablePeerDiscovery, "source", a.opts.PeerSource,
		"self", a.opts.Self.Name, "metrics", a.MetricsAddr(), "probes", a.ProbeAddr()}
	if a.prober != nil {
		kv = append(kv, "probeInterval", a.opts.ProbeInterval.String())
	}
	if a.peerSync != nil {
		kv = append(kv, "peerSync", a.PeerSyncAddr())
	}
	a.log.Info("epp started", kv...)
	return g.Wait()
}
