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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Reconciler recomputes the peer set from the cached slices on every event and
// publishes the difference. It also reports whether the initial list completed.
type Reconciler struct {
	cfg     peerset.Config
	reader  client.Reader
	tracker *peers.Tracker
	log     logr.Logger
	now     func() time.Time

	mu sync.Mutex // serializes recomputes
	peers.SourceStatus
}

var (
	_ reconcile.Reconciler = (*Reconciler)(nil)
)

// NewReconciler returns a Reconciler that reads slices from reader and publishes to n.
func NewReconciler(cfg peerset.Config, reader client.Reader, n peers.PeerNotifier, log logr.Logger) *Reconciler {
	return &Reconciler{cfg: cfg, reader: reader, tracker: peers.NewTracker(n), log: log, now: time.Now}
}

// Reconcile implements reconcile.Reconciler. The request is ignored: the whole set is
// recomputed from the cache, so events arriving out of order never drop a peer. The
// first successful Reconcile marks the reconciler synced: the controller starts its
// workers only after the informer's initial list completed and every event of it
// reached the controller, and a start-up source guarantees that first Reconcile even
// when the Service has no slice yet.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if err := r.recompute(ctx); err != nil {
		return reconcile.Result{}, err
	}
	if r.MarkSynced(r.now()) {
		metrics.Synced.Set(1)
		r.log.Info("peer discovery synced", "namespace", r.cfg.Namespace, "service", r.cfg.Service, "peers", r.tracker.Len())
	}
	return reconcile.Result{}, nil
}

func (r *Reconciler) recompute(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.now()
	var list discoveryv1.EndpointSliceList
	if err := r.reader.List(ctx, &list, client.InNamespace(r.cfg.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: r.cfg.Service}, client.UnsafeDisableDeepCopy); err != nil {
		metrics.Errors.WithLabelValues(metrics.ReasonList).Inc()
		return fmt.Errorf("listing cached endpointslices of service %s/%s: %w", r.cfg.Namespace, r.cfg.Service, err)
	}
	set := peerset.Compute(r.cfg, list.Items)
	r.log.V(1).Info("recomputed peer set", "slices", len(list.Items), "peers", len(set))
	change := r.tracker.Publish(set)
	now := r.now()
	metrics.Recompute.Observe(now.Sub(start).Seconds())
	metrics.EndpointSlices.Set(float64(len(list.Items)))
	metrics.ObserveChange(change, len(set), now)
	if !change.Empty() {
		r.log.Info("peer set changed", "peers", len(set), "upserted", ids(change.Upserts), "deleted", change.Deletes)
	}
	return nil
}

// WatchErrorHandler logs and counts list/watch failures of the informer. A
// forbidden error names the missing permission.
func (r *Reconciler) WatchErrorHandler(_ context.Context, _ *toolscache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return // normal watch ends; the reflector re-lists or re-watches
	case apierrors.IsForbidden(err):
		err = fmt.Errorf("missing RBAC: need get, list and watch on discovery.k8s.io endpointslices in namespace %q (a Role bound to this pod's ServiceAccount): %w", r.cfg.Namespace, err)
		metrics.Errors.WithLabelValues(metrics.ReasonForbidden).Inc()
	default:
		err = fmt.Errorf("list/watch of endpointslices in namespace %q failed: %w", r.cfg.Namespace, err)
		metrics.Errors.WithLabelValues(metrics.ReasonWatch).Inc()
	}
	r.SetError(err)
	r.log.Error(err, "peer discovery cannot read EndpointSlices", "namespace", r.cfg.Namespace, "service", r.cfg.Service)
}

// SetupWithManager registers the controller: EndpointSlice events of the Service and
// one start-up event all map to the same request.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.cfg.Namespace, Name: r.cfg.Service}}
	toKey := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *discoveryv1.EndpointSlice) []reconcile.Request {
		return []reconcile.Request{key}
	})
	ofService := predicate.NewTypedPredicateFuncs(func(s *discoveryv1.EndpointSlice) bool {
		return s.Namespace == r.cfg.Namespace && s.Labels[discoveryv1.LabelServiceName] == r.cfg.Service
	})
	atStart := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(key)
		return nil
	})
	err := builder.ControllerManagedBy(mgr).
		Named("epp-peer-discovery").
		WatchesRawSource(source.Kind(mgr.GetCache(), &discoveryv1.EndpointSlice{}, toKey, ofService)).
		WatchesRawSource(atStart).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			NeedLeaderElection:      ptr.To(false),
			// Missing RBAC must not stop the process: it waits, not ready, until the
			// permission appears.
			CacheSyncTimeout:   time.Duration(math.MaxInt64),
			SkipNameValidation: ptr.To(true),
		}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the endpointslice controller: %w", err)
	}
	return nil
}

func ids(ps []peers.PeerMetadata) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID()
	}
	return out
}
