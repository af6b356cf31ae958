// Package endpointslice discovers an EPP replica's peers from its Service's
// EndpointSlices with a controller-runtime manager.
//
// Source is the peer source (a discovery.ManagerSource): a controller whose every
// event maps to one request; it lists the cached slices, recomputes the whole peer
// set with peerset.Compute and publishes it, so that only the difference reaches the
// notifier. Its cache holds only the slices of one Service in one namespace
// (CacheEntry), so a namespaced Role with get/list/watch on endpointslices is all the
// RBAC it needs and unrelated slices never reach the process. It never runs behind
// leader election: every replica needs its own peer view.
//
// Discovery wraps the source for a Go program that already runs a manager (an EPP):
// SetupWithManager, Start(ctx, notifier), Ready. Settings and ConfigFromJSON build
// and validate its configuration from flags or JSON plugin parameters with the same
// rules and messages.
package endpointslice
