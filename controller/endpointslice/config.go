package endpointslice

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Defaults of the settings.
const (
	DefaultPortName = "peer-sync"
	DefaultPort     = 9005
)

// Settings are what a user sets for EndpointSlice discovery: the epp binary's
// flags, or a plugin's JSON parameters.
type Settings struct {
	// Service is the EPP's own Service; its EndpointSlices list the peers.
	Service string `json:"service"`
	// Namespace of the Service (default: env NAMESPACE, else POD_NAMESPACE).
	Namespace string `json:"namespace,omitempty"`
	// PortName is the Service port whose number is each peer's port (default peer-sync).
	PortName string `json:"portName,omitempty"`
	// Port is used when a slice has no port of that name (default 9005).
	Port int `json:"port,omitempty"`
	// Membership is "ready" (default) or "alive".
	Membership string `json:"membership,omitempty"`
}

// Names are the names of the settings as the user wrote them, so that an error
// names the setting at fault in the user's own terms.
type Names struct {
	Service, Namespace, PortName, Port, Membership string
}

var (
	// FlagNames are the epp binary's flags.
	FlagNames = Names{Service: "--epp-peer-service", Namespace: "--pool-namespace", PortName: "--epp-peer-port-name",
		Port: "--epp-peer-port", Membership: "--epp-peer-membership"}
	// ParamNames are the plugin's JSON parameters.
	ParamNames = Names{Service: "service", Namespace: "namespace", PortName: "portName", Port: "port", Membership: "membership"}
)

// ValidatePort checks a peer port; the error names it as names.Port.
func ValidatePort(names Names, port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("invalid %s=%d: must be between 1 and 65535", names.Port, port)
	}
	return nil
}

// ValidatePortName checks a Service port name; the error names it as names.PortName.
func ValidatePortName(names Names, name string) error {
	if name == "" {
		return fmt.Errorf("%s must not be empty: name the Service port of the peers (default %q)", names.PortName, DefaultPortName)
	}
	if errs := validation.IsValidPortName(name); len(errs) > 0 {
		return fmt.Errorf("invalid %s=%q: %s", names.PortName, name, strings.Join(errs, "; "))
	}
	return nil
}

// ValidateMembership parses a membership; the error names it as names.Membership.
func ValidateMembership(names Names, m string) (peers.Membership, error) {
	got, err := peers.ParseMembership(m)
	if err != nil {
		return "", fmt.Errorf("invalid %s=%q: want %q (ready and not terminating endpoints) or %q (also not-ready ones)",
			names.Membership, m, peers.MembershipReady, peers.MembershipAlive)
	}
	return got, nil
}

// Config validates s and returns the peer-set configuration for the replica self
// (whose Namespace is set to the Service's). Empty PortName and zero Port mean the
// defaults. Every error is one line that names the setting (by names) and the fix.
func (s Settings) Config(names Names, self peers.Self) (peerset.Config, error) {
	if s.PortName == "" {
		s.PortName = DefaultPortName
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if err := ValidatePort(names, s.Port); err != nil {
		return peerset.Config{}, err
	}
	if err := ValidatePortName(names, s.PortName); err != nil {
		return peerset.Config{}, err
	}
	membership, err := ValidateMembership(names, s.Membership)
	if err != nil {
		return peerset.Config{}, err
	}
	if s.Service == "" {
		return peerset.Config{}, fmt.Errorf("%s is required: the name of the EPP's own Service, whose EndpointSlices list the peers", names.Service)
	}
	if errs := validation.IsDNS1035Label(s.Service); len(errs) > 0 {
		return peerset.Config{}, fmt.Errorf("invalid %s=%q: %s", names.Service, s.Service, strings.Join(errs, "; "))
	}
	if s.Namespace == "" {
		return peerset.Config{}, fmt.Errorf("%s needs a namespace: set %s or the NAMESPACE env (downward API fieldRef metadata.namespace)", names.Service, names.Namespace)
	}
	if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
		return peerset.Config{}, fmt.Errorf("invalid %s=%q: %s", names.Namespace, s.Namespace, strings.Join(errs, "; "))
	}
	if !self.Known() {
		return peerset.Config{}, fmt.Errorf("%s: this replica must know itself to leave itself out of its peers: set POD_IP (fieldRef status.podIP), POD_IPS (status.podIPs) or POD_NAME (metadata.name) from the downward API (the host name, used without POD_NAME, could not be read)", names.Service)
	}
	self.Namespace = s.Namespace
	return peerset.Config{
		Namespace:   s.Namespace,
		Service:     s.Service,
		PortName:    s.PortName,
		DefaultPort: int32(s.Port),
		Membership:  membership,
		Self:        self,
	}, nil
}

// NamespaceFromEnv is the default namespace: env NAMESPACE, else POD_NAMESPACE.
func NamespaceFromEnv(getenv func(string) string) string {
	if ns := getenv("NAMESPACE"); ns != "" {
		return ns
	}
	return getenv("POD_NAMESPACE")
}

// ConfigFromJSON reads plugin parameters (Settings as JSON; unknown fields are
// errors) and the replica's identity from the environment (peers.SelfFromEnv, with
// the host name as the fallback name), and validates them as the flags are
// validated. A nil or empty params means all defaults, which lacks the service.
func ConfigFromJSON(params *json.Decoder, getenv func(string) string) (peerset.Config, error) {
	var s Settings
	if params != nil {
		params.DisallowUnknownFields()
		if err := params.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
			return peerset.Config{}, fmt.Errorf("endpointslice peer discovery parameters: %w", err)
		}
	}
	if s.Namespace == "" {
		s.Namespace = NamespaceFromEnv(getenv)
	}
	self, err := peers.SelfFromEnv(s.Namespace, getenv, os.Hostname)
	if err != nil {
		return peerset.Config{}, err
	}
	return s.Config(ParamNames, self)
}
