package endpointslice_test

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// An EPP that already runs a controller-runtime manager adds peer discovery to it:
// build it from settings (or JSON plugin parameters with NewFromJSON), call
// SetupWithManager before the manager starts, then Start with the EPP's notifier.
// It brings a cache of its own scoped to the Service's slices, so the manager's
// cache options need no change and the namespaced endpointslices Role is all it
// needs; AddToCacheOptions would share the manager's cache instead.
func ExampleDiscovery() {
	ctx := ctrl.SetupSignalHandler()
	self, err := peers.SelfFromEnv(os.Getenv("NAMESPACE"), os.Getenv, os.Hostname)
	if err != nil {
		panic(err)
	}
	cfg, err := endpointslice.Settings{Service: "epp", Namespace: os.Getenv("NAMESPACE")}.Config(endpointslice.ParamNames, self)
	if err != nil {
		panic(err) // one line naming the setting at fault
	}
	d := endpointslice.New(cfg, ctrl.Log.WithName("peers"))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{ /* the EPP's own options */ })
	if err != nil {
		panic(err)
	}
	if err := d.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	go func() { _ = mgr.Start(ctx) }()

	store := peers.NewMemoryPeerStore() // or the EPP's own notifier
	go func() { _ = d.Start(ctx, store) }()
	<-d.Ready() // the initial list of slices is in store
}
