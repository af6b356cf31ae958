package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
)

// hostSetup is our handler on the host's slice informer.
type hostSetup struct {
	handler toolscache.ResourceEventHandlerRegistration
}

// setupHostCache refuses to join a host's cache that cannot serve the slices (a
// scheme without EndpointSlices, or a ServiceAccount that may not list them: with a
// missing Role the slice informer would never sync, and controller-runtime holds every
// controller of that cache until its informers synced, then stops the manager when
// their CacheSyncTimeout passes: better fail now, naming the permission), then adds
// the source's handlers to the host's slice informer.
func (s *Source) setupHostCache(mgr manager.Manager) error {
	if !mgr.GetScheme().Recognizes(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")) {
		return errors.New("endpointslice peer discovery: the manager's scheme lacks discovery.k8s.io/v1 EndpointSlice: add k8s.io/client-go/kubernetes/scheme (or discoveryv1.AddToScheme) to it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var list discoveryv1.EndpointSliceList
	err := mgr.GetAPIReader().List(ctx, &list, client.InNamespace(s.cfg.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: s.cfg.Service}, client.Limit(1))
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("endpointslice peer discovery on the host's cache: %w", s.forbidden(err))
	case err != nil:
		// Not a reason to refuse (the API server may be down for a moment), but the
		// replica says so until the cache syncs.
		s.pub.Fail(metrics.ReasonList, fmt.Errorf("listing endpointslices in namespace %q to check the host's cache: %w", s.cfg.Namespace, err))
	}
	// Do not wait for the informer to sync: the manager has not started yet.
	inf, err := mgr.GetCache().GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("endpointslice peer discovery: the host's slice informer: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.onHostUpsert,
		UpdateFunc: func(_, obj any) { s.onHostUpsert(obj) },
		DeleteFunc: func(obj any) {
			if sl, ok := sliceOf(obj); ok {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.deleteLocked(sl)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("endpointslice peer discovery: watching the host's slice informer: %w", err)
	}
	s.host = hostSetup{handler: reg}
	return nil
}

func (s *Source) onHostUpsert(obj any) {
	if sl, ok := sliceOf(obj); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.upsertLocked(sl)
	}
}

// runOnHostCache publishes the set once the host's informer has delivered its
// initial list to the handlers, then watches over the API server (the checks of
// runOwn, through a connection of its own: the host's informer is the host's to
// restart, so staleness is reported, and recovery follows the host's informer).
//
// While the informer has not synced, the replica is not ready, and says why within
// the bounds of the stale signal: every ProbeInterval (±20%) it lists one slice over
// a connection of its own, and a failure (a missing Role, an unreachable API server)
// is reported with its cause until the informer syncs.
func (s *Source) runOnHostCache(ctx context.Context) error {
	if !s.waitHostSync(ctx) {
		return nil
	}
	s.mu.Lock()
	s.markSyncedLocked()
	s.mu.Unlock()
	for {
		client, err := newClientset(s.opts.RESTConfig)
		if err != nil {
			return err
		}
		err = s.checkUntilFailure(ctx, client)
		client.close()
		if ctx.Err() != nil {
			return nil
		}
		s.failCheck(err)
		if !s.waitReachable(ctx) {
			return nil
		}
		s.pub.ClearStale()
	}
}

// waitHostSync waits for the host's informer to deliver its initial list (true) or
// ctx to end (false), checking the API server meanwhile (see runOnHostCache).
func (s *Source) waitHostSync(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced := make(chan bool, 1)
	go func() { synced <- toolscache.WaitForCacheSync(ctx.Done(), s.host.handler.HasSynced) }()
	for {
		select {
		case ok := <-synced:
			return ok
		case <-time.After(jitter(s.opts.ProbeInterval, 0.2)):
		}
		client, err := newClientset(s.opts.RESTConfig)
		if err == nil {
			err = s.check(ctx, client)
			client.close()
		}
		switch {
		case ctx.Err() != nil:
		case err == nil:
		case apierrors.IsForbidden(err):
			s.pub.Fail(metrics.ReasonForbidden, s.forbidden(err))
		default:
			s.pub.Fail(metrics.ReasonList, fmt.Errorf("the host's cache has not synced the endpointslices of namespace %q: listing them fails (%s): %w", s.cfg.Namespace, Classify(err), err))
		}
	}
}
