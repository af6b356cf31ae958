package peerfile

import (
	"fmt"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Reasons are the failure reasons the source reports: the file cannot be read, or
// its content is rejected.
var Reasons = []string{metrics.ReasonRead, metrics.ReasonParse}

// PathSetting selects the source: the peers file.
var PathSetting = discovery.Setting{Param: "path", Flag: "epp-peer-file", Env: []string{"EPP_PEER_FILE"},
	Usage: "Path of a peers file (YAML or JSON); the file is the peer source, no Kubernetes needed."}

// Spec is the source for the epp binary (--epp-peer-file=<path>) and the EPP
// plugin file-peer-discovery (parameter path). Entries without a namespace get
// the replica's (the namespace setting, else "default"), entries without a port
// the port setting; the membership setting decides by their conditions.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        peers.SourceFile,
		Select:      PathSetting,
		Placeholder: "<path>",
		Reasons:     Reasons,
		Settings: func(b *discovery.Binder) discovery.Bound {
			var path string
			var port int
			var membership peers.Membership
			b.String(&path, PathSetting, nil)
			discovery.BindPort(b, &port)
			discovery.BindMembership(b, &membership)
			return discovery.Bound{
				Complete: func(*peers.Self) error {
					if path == "" {
						return fmt.Errorf("%s is required: the path of the peers file", b.Name(PathSetting))
					}
					return nil
				},
				New: func(d discovery.Deps) (discovery.Source, error) {
					return NewSource(Config{
						Path:       path,
						Defaults:   Defaults{Namespace: d.Self.Namespace, Port: int32(port)},
						Membership: membership,
					}, d.Publisher, d.Log), nil
				},
			}
		},
	}
}
