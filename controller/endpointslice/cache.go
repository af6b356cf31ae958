package endpointslice

import (
	"errors"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// before creating the host's manager. Without it, the source runs a reflector of
// its own, which needs no change to the host and recovers fastest from an API
// server outage (see runOwn); on the host's cache, staleness is reported the same
// way but recovery follows the host's informer.
//
// Mind the cost: controller-runtime starts a controller of a cache only once every
// informer of that cache has synced, and stops the manager when that takes longer
// than the controller's CacheSyncTimeout (2 minutes by default). With the host's
// cache, a missing endpointslices Role would therefore stall and then stop the host:
// SetupWithManager checks the permission and refuses with the missing permission
// named, and a Role removed later is reported (a list over a connection of its own
// every ProbeInterval while not synced). The default, a reflector of its own, never
// touches the host.
func (s *Source) AddToCacheOptions(o *cache.Options) error {
	if s.setUp {
		return errors.New("AddToCacheOptions must be called before SetupWithManager")
	}
	for obj := range o.ByObject {
		if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
			return errors.New("the host's cache.Options already have an entry for EndpointSlices: peer discovery needs one scoped to its Service; leave it out and let the discovery run a reflector of its own")
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
