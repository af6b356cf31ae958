package peerdiscovery

import (
	"encoding/json"
	"fmt"
	"strconv"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
)

// Environment variables the EndpointSlice type falls back to for a parameter left
// out of the configuration.
const (
	ServiceEnv    = "EPP_PEER_SERVICE"
	PortNameEnv   = "EPP_PEER_PORT_NAME"
	PortEnv       = "EPP_PEER_PORT"
	MembershipEnv = "EPP_PEER_MEMBERSHIP"
)

// EndpointSliceParameters are the parameters of endpointslice-peer-discovery: the
// settings of the epp binary's EndpointSlice source and the Extras. A setting left
// out comes from its environment variable (service: EPP_PEER_SERVICE, portName:
// EPP_PEER_PORT_NAME, port: EPP_PEER_PORT, membership: EPP_PEER_MEMBERSHIP,
// namespace: NAMESPACE, else POD_NAMESPACE), else its default; service is required.
type EndpointSliceParameters struct {
	endpointslice.Settings
	Extras
}

// EndpointSliceFactory builds endpointslice-peer-discovery from its parameters.
// The replica's identity comes from the downward-API environment (POD_NAME, else
// the host name; POD_IP, POD_IPS). Errors are one line naming the parameter (or
// the variable it came from), worded as the epp binary's flag errors are.
func EndpointSliceFactory(name string, parameters *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p EndpointSliceParameters
	if err := params.Decode(EndpointSliceType, parameters, &p); err != nil {
		return nil, err
	}
	names := endpointslice.ParamNames
	fromEnv := func(v *string, env string, name *string) {
		if *v == "" {
			if *v = getenv(env); *v != "" {
				*name = env
			}
		}
	}
	fromEnv(&p.Service, ServiceEnv, &names.Service)
	fromEnv(&p.PortName, PortNameEnv, &names.PortName)
	fromEnv(&p.Membership, MembershipEnv, &names.Membership)
	if p.Port == 0 {
		if v := getenv(PortEnv); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("invalid %s=%q: not a port number", PortEnv, v)
			}
			p.Port, names.Port = n, PortEnv
		}
	}
	if p.Namespace == "" {
		p.Namespace = endpointslice.NamespaceFromEnv(getenv)
	}
	self, err := selfFromEnv(p.Namespace)
	if err != nil {
		return nil, err
	}
	cfg, err := p.Config(names, self)
	if err != nil {
		return nil, err
	}
	if err := p.resolve(); err != nil {
		return nil, err
	}
	log := logger(EndpointSliceType, name)
	d := endpointslice.New(cfg, log, endpointslice.Options{Instance: name})
	return newPlugin(EndpointSliceType, name, d.PeerDiscovery, cfg.Self, cfg.Namespace, p.Extras, log)
}
