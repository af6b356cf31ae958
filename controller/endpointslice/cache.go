package endpointslice

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions scopes the manager's cache to the EndpointSlices of one Service in
// one namespace. Reading any other type from the cache fails instead of silently
// starting a cluster-wide informer.
func CacheOptions(namespace, service string, onWatchError toolscache.WatchErrorHandlerWithContext) cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&discoveryv1.EndpointSlice{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}),
			},
		},
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            cache.TransformStripManagedFields(),
		DefaultWatchErrorHandler:    onWatchError,
	}
}
