package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Source is the EndpointSlice peer source, a discovery.ManagerSource: a
// controller that recomputes the peer set from the cached slices of one Service on
// every event and publishes it.
type Source struct {
	cfg peerset.Config
	pub *discovery.Publisher
	log logr.Logger
	now func() time.Time

	hostCache bool          // AddToCacheOptions was called
	cache     cache.Cache   // where slices are read from; set by SetupWithManager
	apiReader client.Reader // uncached, for diagnosing a host cache that never syncs

	mu sync.Mutex // serializes recomputes
}

var (
	_ discovery.ManagerSource = (*Source)(nil)
	_ reconcile.Reconciler    = (*Source)(nil)
)

// NewSource returns the source for cfg, publishing through pub.
func NewSource(cfg peerset.Config, pub *discovery.Publisher, log logr.Logger) *Source {
	return &Source{cfg: cfg, pub: pub, log: log, now: time.Now}
}

// Cache is the cache the source reads slices from (nil before SetupWithManager).
func (s *Source) Cache() cache.Cache { return s.cache }

// SetupWithManager registers the controller with mgr, reading slices from the
// host's cache after AddToCacheOptions, else from a cache of its own that it adds
// to mgr. Everything it adds runs on every replica, never behind leader election.
func (s *Source) SetupWithManager(mgr manager.Manager) error {
	if s.cache != nil {
		return errors.New("endpointslice peer discovery: SetupWithManager called twice")
	}
	if s.hostCache {
		if err := s.checkHostCache(mgr); err != nil {
			return err
		}
		s.cache = mgr.GetCache()
	} else {
		c, err := newOwnCache(mgr, s.cfg.Namespace, s.cfg.Service, s.WatchErrorHandler)
		if err != nil {
			return err
		}
		if err := mgr.Add(ownCache{c}); err != nil {
			return fmt.Errorf("adding the endpointslice cache to the manager: %w", err)
		}
		s.cache = c
	}
	s.apiReader = mgr.GetAPIReader()

	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.cfg.Namespace, Name: s.cfg.Service}}
	toKey := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *discoveryv1.EndpointSlice) []reconcile.Request {
		return []reconcile.Request{key}
	})
	ofService := predicate.NewTypedPredicateFuncs(func(sl *discoveryv1.EndpointSlice) bool {
		return sl.Namespace == s.cfg.Namespace && sl.Labels[discoveryv1.LabelServiceName] == s.cfg.Service
	})
	atStart := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(key)
		return nil
	})
	err := builder.ControllerManagedBy(mgr).
		Named("epp-peer-discovery").
		WatchesRawSource(source.Kind(s.cache, &discoveryv1.EndpointSlice{}, toKey, ofService)).
		WatchesRawSource(atStart).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			NeedLeaderElection:      ptr.To(false),
			// Missing RBAC must not stop the process: it waits, not ready, until the
			// permission appears.
			CacheSyncTimeout:   time.Duration(math.MaxInt64),
			SkipNameValidation: ptr.To(true),
		}).
		Complete(s)
	if err != nil {
		return fmt.Errorf("setting up the endpointslice controller: %w", err)
	}
	return nil
}

// checkHostCache refuses to join a host's cache that cannot serve the slices: a
// scheme without EndpointSlices, or a ServiceAccount that may not list them. With a
// missing Role the slice informer would never sync, and controller-runtime holds
// every controller of that cache until its informers synced, stopping the manager
// when their CacheSyncTimeout passes: better fail now, naming the permission.
func (s *Source) checkHostCache(mgr manager.Manager) error {
	if !mgr.GetScheme().Recognizes(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")) {
		return errors.New("endpointslice peer discovery: the manager's scheme lacks discovery.k8s.io/v1 EndpointSlice: add k8s.io/client-go/kubernetes/scheme (or discoveryv1.AddToScheme) to it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var list discoveryv1.EndpointSliceList
	err := mgr.GetAPIReader().List(ctx, &list, client.InNamespace(s.cfg.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: s.cfg.Service}, client.Limit(1))
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("endpointslice peer discovery on the host's cache: %w", s.forbidden(err))
	}
	return nil // other errors (the API server not up yet) are the informer's to retry
}

// Run watches over the source until ctx ends: with the host's cache, whose watch
// errors the source does not see, it diagnoses a sync that does not come (one
// uncached list every DiagnoseInterval until synced) so that a missing Role is
// reported all the same.
func (s *Source) Run(ctx context.Context) error {
	if s.cache == nil {
		return errors.New("endpointslice peer discovery: SetupWithManager must be called before the source runs")
	}
	if s.hostCache {
		s.diagnoseUntilSynced(ctx)
	}
	<-ctx.Done()
	return nil
}

// DiagnoseInterval is how often a source on the host's cache checks, while not
// synced, whether it may list the slices.
const DiagnoseInterval = 10 * time.Second

func (s *Source) diagnoseUntilSynced(ctx context.Context) {
	t := time.NewTicker(DiagnoseInterval)
	defer t.Stop()
	for !s.pub.Synced() {
		select {
		case <-ctx.Done():
			return
		case <-s.pub.Ready():
			return
		case <-t.C:
		}
		var list discoveryv1.EndpointSliceList
		err := s.apiReader.List(ctx, &list, client.InNamespace(s.cfg.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: s.cfg.Service}, client.Limit(1))
		if err != nil && ctx.Err() == nil {
			s.WatchErrorHandler(ctx, nil, err)
		}
	}
}

// Reconcile implements reconcile.Reconciler. The request is ignored: the whole set is
// recomputed from the cache, so events arriving out of order never drop a peer. The
// first Reconcile publishes the first set and so marks the source synced: the
// controller starts its worker only after the informer's initial list completed and
// every event of it reached the controller, and a start-up source guarantees that
// first Reconcile even when the Service has no slice yet.
func (s *Source) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.now()
	var list discoveryv1.EndpointSliceList
	if err := s.cache.List(ctx, &list, client.InNamespace(s.cfg.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: s.cfg.Service}, client.UnsafeDisableDeepCopy); err != nil {
		metrics.Errors.WithLabelValues(metrics.ReasonList).Inc()
		return reconcile.Result{}, fmt.Errorf("listing cached endpointslices of service %s/%s: %w", s.cfg.Namespace, s.cfg.Service, err)
	}
	set := peerset.Compute(s.cfg, list.Items)
	s.log.V(1).Info("recomputed peer set", "slices", len(list.Items), "peers", len(set))
	s.pub.Publish(set)
	metrics.Recompute.Observe(s.now().Sub(start).Seconds())
	metrics.EndpointSlices.Set(float64(len(list.Items)))
	return reconcile.Result{}, nil
}

// WatchErrorHandler records list/watch failures of the informer. A forbidden error
// names the missing permission.
func (s *Source) WatchErrorHandler(_ context.Context, _ *toolscache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return // normal watch ends; the reflector re-lists or re-watches
	case apierrors.IsForbidden(err):
		s.pub.Fail(metrics.ReasonForbidden, s.forbidden(err))
	default:
		s.pub.Fail(metrics.ReasonWatch, fmt.Errorf("list/watch of endpointslices in namespace %q failed: %w", s.cfg.Namespace, err))
	}
}

func (s *Source) forbidden(err error) error {
	return fmt.Errorf("missing RBAC: need get, list and watch on discovery.k8s.io endpointslices in namespace %q (a Role bound to this pod's ServiceAccount): %w", s.cfg.Namespace, err)
}
