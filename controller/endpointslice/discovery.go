package endpointslice

import (
	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Discovery is EndpointSlice peer discovery for a Go program, in the plugin shape of
// llm-d-router's EPP: Start with the program's notifier, then Ready is closed after
// the initial reconciliation. Start is all it needs: without Options.RESTConfig it
// loads the client configuration itself (kubeconfig.Load, controller-runtime's
// order: $KUBECONFIG, in-cluster, ~/.kube/config) and runs a reflector of its own,
// scoped to the Service's slices. A program that runs a controller-runtime manager
// may instead, as an extra, call SetupWithManager.
type Discovery struct {
	*discovery.PeerDiscovery
	source *Source
}

// New returns EndpointSlice discovery for cfg (see Settings.Config to build and
// validate one). Its metrics carry the label discovery=opts.Instance; without one,
// a name no other discovery of the process has ("endpointslice" for the first one,
// then "endpointslice-2", ...).
func New(cfg peerset.Config, log logr.Logger, opts Options) *Discovery {
	d := &Discovery{}
	build := func(pub *discovery.Publisher) (discovery.Source, error) {
		d.source = NewSource(cfg, pub, log, opts)
		return d.source, nil
	}
	pd, err := discovery.NewPeerDiscovery(peers.SourceEndpointSlice, log,
		discovery.PublisherOptions{Instance: opts.Instance, Self: cfg.Self, Reasons: Reasons}, build)
	if err != nil {
		panic(err) // build cannot fail
	}
	d.PeerDiscovery = pd
	return d
}

// SetupWithManager joins the program's manager (see Source.SetupWithManager).
func (d *Discovery) SetupWithManager(mgr manager.Manager) error {
	return d.source.SetupWithManager(mgr)
}

// Slices returns the names of the slices the discovery holds.
func (d *Discovery) Slices() []string { return d.source.Slices() }
