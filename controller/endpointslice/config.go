package endpointslice

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Defaults of the settings.
const (
	DefaultPortName = discovery.DefaultPortName
	DefaultPort     = discovery.DefaultPort
)

// Settings are what a user sets for EndpointSlice discovery, as a Go program
// writes them; their JSON is the plugin's parameters (Spec declares them, with
// the epp binary's flags and the variables).
type Settings struct {
	// Service is the EPP's own Service; its EndpointSlices list the peers.
	Service string `json:"service,omitempty"`
	// Namespace of the Service (required).
	Namespace string `json:"namespace,omitempty"`
	// PortName is the Service port whose number is each peer's port (default peer-sync).
	PortName string `json:"portName,omitempty"`
	// Port is used when a slice has no port of that name (default 9005).
	Port int `json:"port,omitempty"`
	// Membership is "ready" (default) or "alive".
	Membership string `json:"membership,omitempty"`
}

// Config checks s as the plugin checks its parameters (the same checks and
// messages, naming the parameter: `invalid service="EPP.svc": ...`) and returns
// the peer-set configuration for the replica self (whose Namespace is set to the
// Service's). Empty PortName and zero Port mean the defaults.
func (s Settings) Config(self peers.Self) (peerset.Config, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return peerset.Config{}, err
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(raw, &params); err != nil {
		return peerset.Config{}, err
	}
	b := discovery.NewBinder(params, nil)
	got := Settings{}
	b.String(&got.Namespace, discovery.NamespaceSetting, discovery.CheckNamespace)
	got.bind(b)
	if err := b.Err(); err != nil {
		return peerset.Config{}, err
	}
	return got.config(b, self)
}

// bind binds the source's own settings (all but the namespace) on b into s.
func (s *Settings) bind(b *discovery.Binder) {
	b.String(&s.Service, ServiceSetting, func(svc string) error {
		if errs := validation.IsDNS1035Label(svc); len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
	discovery.BindPortName(b, &s.PortName)
	discovery.BindPort(b, &s.Port)
	var m peers.Membership
	discovery.BindMembership(b, &m)
	s.Membership = string(m)
}

// config checks the settings together and returns the peer-set configuration for
// self; errors name the settings with b.
func (s Settings) config(b *discovery.Binder, self peers.Self) (peerset.Config, error) {
	if s.Service == "" {
		return peerset.Config{}, fmt.Errorf("%s is required: the name of the EPP's own Service, whose EndpointSlices list the peers", b.Name(ServiceSetting))
	}
	if s.Namespace == "" {
		return peerset.Config{}, fmt.Errorf("%s needs a namespace: set %s or the NAMESPACE env (downward API fieldRef metadata.namespace)", b.Name(ServiceSetting), b.Name(discovery.NamespaceSetting))
	}
	if !self.Known() {
		return peerset.Config{}, fmt.Errorf("%s: this replica must know itself to leave itself out of its peers: set POD_IP (fieldRef status.podIP), POD_IPS (status.podIPs) or POD_NAME (metadata.name) from the downward API (the host name, used without POD_NAME, could not be read)", b.Name(ServiceSetting))
	}
	self.Namespace = s.Namespace
	membership, _ := peers.ParseMembership(s.Membership)
	return peerset.Config{
		Namespace:   s.Namespace,
		Service:     s.Service,
		PortName:    s.PortName,
		DefaultPort: int32(s.Port),
		Membership:  membership,
		Self:        self,
	}, nil
}
