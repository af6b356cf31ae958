package peerdiscovery

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/dnssrv"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
)

// DNSParameters are the parameters of dns-peer-discovery.
type DNSParameters struct {
	// Name is the SRV name of the peer port of a headless Service:
	// _peer-sync._tcp.<service>.<namespace>.svc.cluster.local (env EPP_PEER_DNS).
	// Either it or service is required.
	Name string `json:"name,omitempty"`
	// Service is the headless Service, for the name _<portName>._tcp.<service>,
	// which the pod's DNS search path completes (env EPP_PEER_DNS_SERVICE; a
	// kustomize name reference can rename it with the Service).
	Service string `json:"service,omitempty"`
	// PortName is the Service port of the peers (default peer-sync; env
	// EPP_PEER_PORT_NAME), with service.
	PortName string `json:"portName,omitempty"`
	// Namespace of the peers (default: env NAMESPACE, else POD_NAMESPACE).
	Namespace string `json:"namespace,omitempty"`
	// Interval between lookups, at least 1s (default 5s).
	Interval *params.Duration `json:"interval,omitempty"`
	// Server, if set, is the DNS server to ask ("10.96.0.10:53") instead of the
	// system's resolver.
	Server string `json:"server,omitempty"`
	Extras
}

// Variables the DNS type falls back to.
const (
	DNSNameEnv    = "EPP_PEER_DNS"
	DNSServiceEnv = "EPP_PEER_DNS_SERVICE"
)

// DNSFactory builds dns-peer-discovery from its parameters. The replica recognizes
// itself in the answers by POD_IP / POD_IPS (required).
func DNSFactory(name string, parameters *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p DNSParameters
	if err := params.Decode(DNSType, parameters, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		p.Name = getenv(DNSNameEnv)
	}
	if p.Service == "" {
		p.Service = getenv(DNSServiceEnv)
	}
	if p.PortName == "" {
		p.PortName = getenv(PortNameEnv)
	}
	if p.PortName == "" {
		p.PortName = endpointslice.DefaultPortName
	}
	switch {
	case p.Name != "" && p.Service != "":
		return nil, fmt.Errorf("name and service are mutually exclusive: set the SRV name, or the headless Service")
	case p.Name == "" && p.Service == "":
		return nil, fmt.Errorf("name or service is required (or env %s, %s): the SRV name of the peer port of a headless Service, _peer-sync._tcp.<service>.<namespace>.svc.cluster.local, or that Service", DNSNameEnv, DNSServiceEnv)
	case p.Service != "":
		p.Name = "_" + p.PortName + "._tcp." + p.Service
	}
	if err := dnssrv.ValidateName(p.Name); err != nil {
		return nil, fmt.Errorf("invalid name: %w", err)
	}
	interval := dnssrv.DefaultInterval
	if p.Interval != nil {
		if interval = p.Interval.Duration; interval < time.Second {
			return nil, fmt.Errorf("invalid interval=%q: want at least 1s", p.Interval)
		}
	}
	if p.Server != "" {
		if _, err := netip.ParseAddrPort(p.Server); err != nil {
			return nil, fmt.Errorf("invalid server=%q: want an IP address and port, e.g. 10.96.0.10:53", p.Server)
		}
	}
	if err := p.resolve(); err != nil {
		return nil, err
	}
	if p.Namespace == "" {
		p.Namespace = endpointslice.NamespaceFromEnv(getenv)
	}
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	self, err := selfFromEnv(p.Namespace)
	if err != nil {
		return nil, err
	}
	if len(self.Addresses) == 0 {
		return nil, fmt.Errorf("%s: this replica recognizes itself in DNS answers by its address: set POD_IP (fieldRef status.podIP) or POD_IPS (status.podIPs) from the downward API", DNSType)
	}
	log := logger(DNSType, name)
	d, err := discovery.NewPeerDiscovery(dnssrv.SourceName, log,
		discovery.PublisherOptions{Instance: name, Self: self, Reasons: []string{dnssrv.ReasonLookup}},
		func(pub *discovery.Publisher) (discovery.Source, error) {
			return dnssrv.NewSource(dnssrv.Config{Name: p.Name, Namespace: p.Namespace, Family: self.Family(),
				Interval: interval, Resolver: dnssrv.Resolver(p.Server)}, pub, log), nil
		})
	if err != nil {
		return nil, err
	}
	return newPlugin(DNSType, name, d, self, p.Namespace, p.Extras, log)
}
