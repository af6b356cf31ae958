package endpointslice

import (
	"encoding/json"
	"os"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Discovery is EndpointSlice peer discovery for a Go program that runs its own
// controller-runtime manager, such as an EPP: call SetupWithManager before the
// manager starts, then Start with the program's notifier; Ready is closed after the
// initial reconciliation. Optionally, AddToCacheOptions before the manager is
// created makes it share the program's cache.
type Discovery struct {
	*discovery.PeerDiscovery
	source *Source
}

// New returns EndpointSlice discovery for cfg (see Settings.Config to build and
// validate one).
func New(cfg peerset.Config, log logr.Logger) *Discovery {
	d := &Discovery{}
	build := func(pub *discovery.Publisher) (discovery.Source, error) {
		d.source = NewSource(cfg, pub, log, Options{})
		return d.source, nil
	}
	pd, err := discovery.NewPeerDiscovery(peers.SourceEndpointSlice, log, build)
	if err != nil {
		panic(err) // build cannot fail
	}
	d.PeerDiscovery = pd
	return d
}

// NewFromJSON builds Discovery from plugin parameters (see ConfigFromJSON), with
// the replica's identity from the environment. Errors are one line naming the
// parameter, worded as the epp binary's flag errors are.
func NewFromJSON(params *json.Decoder, log logr.Logger) (*Discovery, error) {
	cfg, err := ConfigFromJSON(params, os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(cfg, log), nil
}

// AddToCacheOptions merges the cache entry of the Service's slices into the host's
// cache options (see Source.AddToCacheOptions).
func (d *Discovery) AddToCacheOptions(o *cache.Options) error { return d.source.AddToCacheOptions(o) }

// Slices returns the names of the slices the discovery holds.
func (d *Discovery) Slices() []string { return d.source.Slices() }
