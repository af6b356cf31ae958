package endpointslice_test

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// A Go program adds peer discovery with Start alone: the discovery loads the client
// configuration itself ($KUBECONFIG, else in-cluster) and runs a reflector of its
// own scoped to the Service's slices, so the namespaced endpointslices Role is all
// it needs. Build it from settings (or from plugin parameters, with discovery.ConfigureParams and Spec).
func ExampleDiscovery() {
	ctx := ctrl.SetupSignalHandler()
	self, err := peers.SelfFromEnv(os.Getenv("NAMESPACE"), os.Getenv, os.Hostname)
	if err != nil {
		panic(err)
	}
	cfg, err := endpointslice.Settings{Service: "epp", Namespace: os.Getenv("NAMESPACE")}.Config(self)
	if err != nil {
		panic(err) // one line naming the setting at fault
	}
	d := endpointslice.New(cfg, ctrl.Log.WithName("peers"), endpointslice.Options{})

	store := peers.NewMemoryPeerStore() // or the program's own notifier
	go func() { _ = d.Start(ctx, store) }()
	<-d.Ready() // the initial list of slices is in store
}

// A program that already runs a controller-runtime manager may join it instead, as
// an extra: SetupWithManager before the manager starts (the manager's start then
// runs the discovery, with a reflector of its own, on every replica).
func ExampleDiscovery_SetupWithManager() {
	ctx := ctrl.SetupSignalHandler()
	self, err := peers.SelfFromEnv(os.Getenv("NAMESPACE"), os.Getenv, os.Hostname)
	if err != nil {
		panic(err)
	}
	cfg, err := endpointslice.Settings{Service: "epp", Namespace: os.Getenv("NAMESPACE")}.Config(self)
	if err != nil {
		panic(err)
	}
	d := endpointslice.New(cfg, ctrl.Log.WithName("peers"), endpointslice.Options{})
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{ /* the program's own options */ })
	if err != nil {
		panic(err)
	}
	if err := d.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	store := peers.NewMemoryPeerStore()
	go func() { _ = d.Start(ctx, store) }()
	<-d.Ready()
}
