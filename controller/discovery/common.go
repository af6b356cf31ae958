package discovery

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Settings that several sources share, declared once here. NamespaceSetting is
// every source's (the configuration step binds it before the source's own); a
// source binds the others it uses with BindPortName, BindPort and BindMembership.
var (
	// NamespaceSetting is the namespace of the peers and of what the source reads.
	NamespaceSetting = Setting{Param: "namespace", Flag: "pool-namespace", Env: []string{"NAMESPACE", "POD_NAMESPACE"},
		Usage: "Namespace of the peers and of what the source reads (the Service and its slices, the pods)."}
	// PortNameSetting names the port whose number is each peer's port.
	PortNameSetting = Setting{Param: "portName", Flag: "epp-peer-port-name", Env: []string{"EPP_PEER_PORT_NAME"},
		Usage: "Name of the port whose number is each peer's port (the Service's, or the pod's container port)."}
	// PortSetting is each peer's port where its source names no port of that name.
	PortSetting = Setting{Param: "port", Flag: "epp-peer-port", Env: []string{"EPP_PEER_PORT"},
		Usage: "Each peer's port where the source has no port of that name (a slice without it, a pod without it, a peers file entry without a port)."}
	// MembershipSetting says which endpoints are peers.
	MembershipSetting = Setting{Param: "membership", Flag: "epp-peer-membership", Env: []string{"EPP_PEER_MEMBERSHIP"},
		Usage: `Which endpoints are peers: "ready" (ready, not terminating) or "alive" (also not ready, e.g. leader-election standbys).`}
)

// Defaults of the shared settings.
const (
	DefaultPortName = "peer-sync"
	DefaultPort     = 9005
)

// CheckNamespace refuses what is not a namespace name.
func CheckNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// BindPortName binds PortNameSetting to p (default DefaultPortName).
func BindPortName(b *Binder, p *string) {
	*p = DefaultPortName
	b.String(p, PortNameSetting, func(name string) error {
		if name == "" {
			return fmt.Errorf("must not be empty: name the port of the peers (default %q)", DefaultPortName)
		}
		if errs := validation.IsValidPortName(name); len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
}

// BindPort binds PortSetting to p (default DefaultPort).
func BindPort(b *Binder, p *int) {
	*p = DefaultPort
	b.Int(p, PortSetting, func(port int) error {
		if port < 1 || port > 65535 {
			return errors.New("must be between 1 and 65535")
		}
		return nil
	})
}

// BindMembership binds MembershipSetting to p (default peers.MembershipReady).
func BindMembership(b *Binder, p *peers.Membership) {
	s := string(peers.MembershipReady)
	b.String(&s, MembershipSetting, func(m string) error {
		if _, err := peers.ParseMembership(m); err != nil {
			return fmt.Errorf("want %q (ready and not terminating endpoints) or %q (also not-ready ones)", peers.MembershipReady, peers.MembershipAlive)
		}
		return nil
	})
	*p, _ = peers.ParseMembership(s)
}
