package endpointslice

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Reasons are the failure reasons the source reports: a missing Role, a failed
// list or watch, and the causes of a failed API server check (Classify).
var Reasons = []string{metrics.ReasonForbidden, metrics.ReasonWatch,
	"unauthorized", "refused", "reset", "tls", "server-error", "timeout", "other"}

// Spec is the source as the epp binary knows it: --epp-peer-service=<the EPP
// Service>, with the shared --pool-namespace, --epp-peer-port-name, --epp-peer-port
// and --epp-peer-membership.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        peers.SourceEndpointSlice,
		Flag:        "epp-peer-service",
		Placeholder: "<the EPP Service>",
		Usage:       "Name of the EPP's own Service; its EndpointSlices are the peer source.",
		Reasons:     Reasons,
		Complete: func(s *discovery.Settings) error {
			cfg, err := settingsOf(*s).Config(FlagNames, s.Self)
			if err != nil {
				return err
			}
			s.Self = cfg.Self
			return nil
		},
		New: func(d discovery.Deps) (discovery.Source, error) {
			cfg, err := settingsOf(d.Settings).Config(FlagNames, d.Self)
			if err != nil {
				return nil, err
			}
			rc, err := d.RESTConfig()
			if err != nil {
				return nil, err
			}
			return NewSource(cfg, d.Publisher, d.Log, Options{RESTConfig: rc}), nil
		},
	}
}

// settingsOf are the source's settings from the binary's shared settings.
func settingsOf(s discovery.Settings) Settings {
	return Settings{Service: s.Arg, Namespace: s.Namespace, PortName: s.PortName, Port: s.Port, Membership: string(s.Membership)}
}
