package peerfile

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Reasons are the failure reasons the source reports: the file cannot be read, or
// its content is rejected.
var Reasons = []string{metrics.ReasonRead, metrics.ReasonParse}

// Spec is the source as the epp binary knows it: --epp-peer-file=<path>; entries
// without a namespace or port get the replica's namespace and --epp-peer-port.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        peers.SourceFile,
		Flag:        "epp-peer-file",
		Placeholder: "<path>",
		Usage:       "Path of a peers file (YAML or JSON); the file is the peer source, no Kubernetes needed.",
		Reasons:     Reasons,
		New: func(d discovery.Deps) (discovery.Source, error) {
			return NewSource(Config{
				Path:       d.Arg,
				Defaults:   Defaults{Namespace: d.Self.Namespace, Port: int32(d.Port)},
				Membership: d.Membership,
			}, d.Publisher, d.Log), nil
		},
	}
}
