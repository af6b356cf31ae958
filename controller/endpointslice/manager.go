package endpointslice

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// NewManager returns a manager whose cache holds only cfg's slices, with the
// Reconciler registered. The manager serves nothing itself (the caller serves
// metrics and probes) and never elects a leader.
func NewManager(restConfig *rest.Config, cfg peerset.Config, n peers.PeerNotifier, log logr.Logger) (manager.Manager, *Reconciler, error) {
	r := NewReconciler(cfg, nil, n, log.WithName("endpointslice"))
	mgr, err := manager.New(restConfig, manager.Options{
		Scheme:                 scheme.Scheme,
		Cache:                  CacheOptions(cfg.Namespace, cfg.Service, r.WatchErrorHandler),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Logger:                 log,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the manager: %w", err)
	}
	r.reader = mgr.GetCache()
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	return mgr, r, nil
}
