package app

import (
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// SourceSpec is one peer source of the binary: the flag that selects it and how to
// validate and build it.
type SourceSpec struct {
	// Name is the source's name: Options.PeerSource, /debug/peers "source".
	Name string
	// Flag (without the dashes) selects the source; its value, Options.SourceArg, is
	// the source's argument (the Service, the file).
	Flag string
	// Placeholder names the flag's value in messages: --<Flag>=<Placeholder>.
	Placeholder string
	// Usage is the flag's help.
	Usage string
	// Complete validates the options for this source before any network call, and
	// may fill them in; its error is printed as one line (exit code 2). May be nil.
	Complete func(o *Options) error
	// New builds the source.
	New func(SourceDeps) (discovery.Source, error)
}

// SourceDeps is what SourceSpec.New gets to build its source.
type SourceDeps struct {
	// Options are the parsed options.
	Options Options
	// Publisher is where the source publishes its peer sets.
	Publisher *discovery.Publisher
	// RESTConfig loads the Kubernetes client configuration, for sources that need one.
	RESTConfig func() (*rest.Config, error)
	// Log is the source's logger.
	Log logr.Logger
}

// Sources are the peer sources the binary knows, in the order of their flags.
type Sources []SourceSpec

// DefaultSources are the sources of the epp binary. A new source is a package that
// implements discovery.Source and one entry here: its flag, its checks, its
// constructor.
func DefaultSources() Sources {
	return Sources{
		{
			Name: peers.SourceEndpointSlice, Flag: "epp-peer-service", Placeholder: "<the EPP Service>",
			Usage:    "Name of the EPP's own Service; its EndpointSlices are the peer source.",
			Complete: completeEndpointSlice,
			New: func(d SourceDeps) (discovery.Source, error) {
				rc, err := d.RESTConfig()
				if err != nil {
					return nil, err
				}
				return endpointslice.NewSource(d.Options.EndpointSlice, d.Publisher, d.Log, endpointslice.Options{RESTConfig: rc}), nil
			},
		},
		{
			Name: peers.SourceFile, Flag: "epp-peer-file", Placeholder: "<path>",
			Usage: "Path of a peers file (YAML or JSON); the file is the peer source, no Kubernetes needed.",
			New: func(d SourceDeps) (discovery.Source, error) {
				o := d.Options
				return peerfile.NewSource(peerfile.Config{
					Path:       o.SourceArg,
					Defaults:   peerfile.Defaults{Namespace: o.Self.Namespace, Port: int32(o.PeerPort)},
					Membership: o.PeerMembership,
					Self:       o.Self,
				}, d.Publisher, d.Log), nil
			},
		},
	}
}

// completeEndpointSlice validates the EndpointSlice source's settings (the same
// checks and words as the plugin's parameters) and keeps its configuration.
func completeEndpointSlice(o *Options) error {
	cfg, err := endpointslice.Settings{
		Service:    o.SourceArg,
		Namespace:  o.PoolNamespace,
		PortName:   o.PeerPortName,
		Port:       o.PeerPort,
		Membership: string(o.PeerMembership),
	}.Config(endpointslice.FlagNames, o.Self)
	if err != nil {
		return err
	}
	o.EndpointSlice, o.Self = cfg, cfg.Self
	return nil
}

func (s Sources) lookup(name string) (SourceSpec, bool) {
	for _, spec := range s {
		if spec.Name == name {
			return spec, true
		}
	}
	return SourceSpec{}, false
}
