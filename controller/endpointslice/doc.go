// Package endpointslice discovers an EPP replica's peers from its Service's
// EndpointSlices.
//
// Source is the peer source (a discovery.Source). It runs a client-go Reflector of
// its own, scoped to the Service's slices in its namespace (the
// kubernetes.io/service-name label), so a namespaced Role with get/list/watch on
// endpointslices is all the RBAC it needs and unrelated slices never reach the
// process. It keeps the peer set incrementally (peerset.State): a slice event
// re-decides only the identities that slice lists and publishes only the change. A
// health check watches over the connection to the API server and reports a lost one
// as a stale view (package kubewatch). It never runs behind leader election: every
// replica needs its own peer view.
//
// Discovery wraps the source for a Go program in llm-d-router's plugin shape:
// Start(ctx, notifier) and Ready, nothing else needed. A program that runs a
// controller-runtime manager may join it instead (SetupWithManager). Spec declares
// the source's settings once, for the epp binary's flags and the EPP plugin's
// parameters; Settings.Config checks a Go program's settings the same way.
package endpointslice
