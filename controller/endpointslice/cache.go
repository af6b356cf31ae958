package endpointslice

import (
	"errors"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// CacheEntry is the cache entry for the EndpointSlices of one Service: only its
// namespace, only slices labelled kubernetes.io/service-name=<service>, managed
// fields stripped. A namespaced Role with get/list/watch on endpointslices is all it
// needs, and unrelated slices never reach the process.
func CacheEntry(namespace, service string) (client.Object, cache.ByObject) {
	return &discoveryv1.EndpointSlice{}, cache.ByObject{
		Namespaces: map[string]cache.Config{namespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}),
		Transform:  cache.TransformStripManagedFields(),
	}
}

// AddToCacheOptions merges the source's CacheEntry into a host's cache options,
// leaving the host's other entries and defaults as they are, and makes the source
// read its slices from the host's cache (one informer for the process). Call it
// before creating the host's manager. Without it, SetupWithManager gives the source
// a small cache of its own instead, which needs no change to the host.
//
// Mind the cost: controller-runtime starts a controller of a cache only once every
// informer of that cache has synced, and stops the manager when that takes longer
// than the controller's CacheSyncTimeout (2 minutes by default). With the host's
// cache, a missing endpointslices Role would therefore stall and then stop the host:
// SetupWithManager checks the permission and refuses with the missing permission
// named, and a Role removed later is reported (an uncached list every
// DiagnoseInterval while not synced). The default, a cache of its own, never touches
// the host.
func (s *Source) AddToCacheOptions(o *cache.Options) error {
	if s.cache != nil {
		return errors.New("AddToCacheOptions must be called before SetupWithManager")
	}
	for obj := range o.ByObject {
		if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
			return errors.New("the host's cache.Options already have an entry for EndpointSlices: peer discovery needs one scoped to its Service; leave it out and let SetupWithManager add a cache of its own")
		}
	}
	if o.Scheme != nil && !o.Scheme.Recognizes(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")) {
		return errors.New("the host's scheme lacks discovery.k8s.io/v1 EndpointSlice: add k8s.io/client-go/kubernetes/scheme (or discoveryv1.AddToScheme) to it")
	}
	// (SetupWithManager checks the manager's scheme too: hosts usually set it there.)
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	obj, entry := CacheEntry(s.cfg.Namespace, s.cfg.Service)
	o.ByObject[obj] = entry
	s.hostCache = true
	return nil
}

// newOwnCache is the source's own cache: only the Service's slices, and any other
// read fails instead of silently starting an informer the Role does not allow.
func newOwnCache(mgr manager.Manager, namespace, service string, onWatchError toolscache.WatchErrorHandlerWithContext) (cache.Cache, error) {
	obj, entry := CacheEntry(namespace, service)
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:                  mgr.GetHTTPClient(),
		Scheme:                      scheme.Scheme,
		Mapper:                      mgr.GetRESTMapper(),
		ByObject:                    map[client.Object]cache.ByObject{obj: entry},
		ReaderFailOnMissingInformer: true,
		DefaultWatchErrorHandler:    onWatchError,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the endpointslice cache: %w", err)
	}
	return c, nil
}

// ownCache runs the source's cache in the manager on every replica, leader or not,
// and apart from the manager's cache-sync wait, so that a missing Role never holds
// up the host's other runnables.
type ownCache struct{ cache.Cache }

func (ownCache) NeedLeaderElection() bool { return false }
