package app

import (
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// SourceDeps is what a source factory gets to build its source.
type SourceDeps struct {
	// Options are the parsed options.
	Options Options
	// Publisher is where the source publishes its peer sets.
	Publisher *discovery.Publisher
	// RESTConfig loads the Kubernetes client configuration, for sources that need
	// one (a ManagerSource gets its manager from the app without calling it).
	RESTConfig func() (*rest.Config, error)
	// Log is the source's logger.
	Log logr.Logger
}

// SourceFactory builds one kind of peer source.
type SourceFactory func(SourceDeps) (discovery.Source, error)

// Sources maps the names in Options.PeerSource to factories.
type Sources map[string]SourceFactory

// DefaultSources are the sources of the epp binary. A new source is a package that
// implements discovery.Source and one line here (plus the flag that selects it).
func DefaultSources() Sources {
	return Sources{
		peers.SourceEndpointSlice: func(d SourceDeps) (discovery.Source, error) {
			return endpointslice.NewSource(d.Options.EndpointSlice, d.Publisher, d.Log), nil
		},
		peers.SourceFile: func(d SourceDeps) (discovery.Source, error) {
			o := d.Options
			return peerfile.NewSource(peerfile.Config{
				Path:       o.PeerFile,
				Defaults:   peerfile.Defaults{Namespace: o.Self.Namespace, Port: int32(o.PeerPort)},
				Membership: o.PeerMembership,
				Self:       o.Self,
			}, d.Publisher, d.Log), nil
		},
	}
}
