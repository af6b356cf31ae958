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
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("endpointslice peer discovery on the host's cache: %w", s.forbidden(err))
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
func (s *Source) runOnHostCache(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.host.handler.HasSynced) {
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
		reason, err := s.checkUntilFailure(ctx, client)
		client.close()
		if ctx.Err() != nil {
			return nil
		}
		s.pub.SetStale(reason, err)
		if !s.waitReachable(ctx) {
			return nil
		}
		s.pub.ClearStale()
	}
}
