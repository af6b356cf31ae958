// Package endpointslice discovers an EPP replica's peers from its Service's
// EndpointSlices with a controller-runtime manager.
//
// The manager's cache holds only the slices of one Service in one namespace (see
// CacheOptions), so a namespaced Role with get/list/watch on endpointslices is all the
// RBAC it needs and unrelated slices never reach the process. Every event maps to one
// request; the Reconciler then lists the cached slices, recomputes the whole peer set
// with peerset.Compute, and publishes only the difference to a peers.PeerNotifier. It
// never runs behind leader election: every replica needs its own peer view.
package endpointslice
