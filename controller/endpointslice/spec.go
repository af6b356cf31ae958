package endpointslice

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubewatch"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Reasons are the failure reasons the source reports: a missing Role, a failed
// list or watch, and the causes of a failed API server check (kubewatch.Reasons).
var Reasons = kubewatch.Reasons

// ServiceSetting selects the source: the EPP's own Service, whose EndpointSlices
// list the peers.
var ServiceSetting = discovery.Setting{Param: "service", Flag: "epp-peer-service", Env: []string{"EPP_PEER_SERVICE"},
	Usage: "Name of the EPP's own Service; its EndpointSlices are the peer source."}

// Spec is the source for the epp binary (--epp-peer-service=<the EPP Service>)
// and the EPP plugin endpointslice-peer-discovery (parameter service), with the
// shared namespace, port name, port and membership settings.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        peers.SourceEndpointSlice,
		Select:      ServiceSetting,
		Placeholder: "<the EPP Service>",
		Reasons:     Reasons,
		Permissions: []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}},
		Settings: func(b *discovery.Binder) discovery.Bound {
			var s Settings
			s.bind(b)
			var cfg peerset.Config
			return discovery.Bound{
				Complete: func(self *peers.Self) (err error) {
					s.Namespace = b.Namespace()
					cfg, err = s.config(b, *self)
					*self = cfg.Self
					return err
				},
				New: func(d discovery.Deps) (discovery.Source, error) {
					return NewSource(cfg, d.Publisher, d.Log, Options{loadConfig: d.RESTConfig}), nil
				},
			}
		},
	}
}
