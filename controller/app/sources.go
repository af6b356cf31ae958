package app

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/dnssrv"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
)

// Sources are the peer sources the binary knows, in the order of their flags.
type Sources []discovery.SourceSpec

// DefaultSources are the sources of the epp binary. A new source is a package that
// implements discovery.Source and offers its discovery.SourceSpec (its flag, its own
// flags and failure reasons, its checks, its constructor), plus one line here.
func DefaultSources() Sources {
	return Sources{
		endpointslice.Spec(),
		peerfile.Spec(),
		dnssrv.Spec(),
	}
}

func (s Sources) lookup(name string) (discovery.SourceSpec, bool) {
	for _, spec := range s {
		if spec.Name == name {
			return spec, true
		}
	}
	return discovery.SourceSpec{}, false
}
