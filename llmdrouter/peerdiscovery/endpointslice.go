package peerdiscovery

import (
	"encoding/json"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// EndpointSliceParameters are the parameters of endpointslice-peer-discovery: the
// settings of the epp binary's EndpointSlice source (service is required; the
// namespace defaults to env NAMESPACE, else POD_NAMESPACE), and debugAddress.
type EndpointSliceParameters struct {
	endpointslice.Settings
	// DebugAddress, if set, serves /debug/peers there (e.g. ":9091").
	DebugAddress string `json:"debugAddress,omitempty"`
}

// EndpointSliceFactory builds endpointslice-peer-discovery from its parameters.
// The replica's identity comes from the downward-API environment (POD_NAME, else
// the host name; POD_IP, POD_IPS). Errors are one line naming the parameter.
func EndpointSliceFactory(name string, params *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p EndpointSliceParameters
	if err := decode(EndpointSliceType, params, &p); err != nil {
		return nil, err
	}
	if p.Namespace == "" {
		p.Namespace = endpointslice.NamespaceFromEnv(getenv)
	}
	self, err := selfFromEnv(p.Namespace)
	if err != nil {
		return nil, err
	}
	cfg, err := p.Config(endpointslice.ParamNames, self)
	if err != nil {
		return nil, err
	}
	if err := validateDebugAddress(p.DebugAddress); err != nil {
		return nil, err
	}
	log := logger(EndpointSliceType, name)
	d := endpointslice.New(cfg, log, endpointslice.Options{Instance: name})
	return &Plugin{
		typedName: fwkplugin.TypedName{Type: EndpointSliceType, Name: name},
		discovery: d.PeerDiscovery,
		view: debugpeers.New(debugpeers.Options{Store: d.Peers(), Publisher: d.Publisher(),
			Self: peers.SelfDocument{Name: cfg.Self.Name, Namespace: cfg.Namespace, Addresses: cfg.Self.Strings()}}),
		debugAddr: p.DebugAddress,
		log:       log,
	}, nil
}
