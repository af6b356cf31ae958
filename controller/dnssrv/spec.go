package dnssrv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// SourceName is the source's name (/debug/peers "source").
const SourceName = "dns"

// The source's own settings (besides the shared namespace and port name).
var (
	// NameSetting selects the source: the SRV name of the peer port of a headless
	// Service.
	NameSetting = discovery.Setting{Param: "name", Flag: "epp-peer-dns", Env: []string{"EPP_PEER_DNS"},
		Usage: "SRV name of the peer port of a headless Service (_peer-sync._tcp.<service>.<namespace>.svc.cluster.local); DNS is the peer source, no RBAC needed."}
	// ServiceSetting names the headless Service instead of the SRV name: the name
	// is then _<portName>._tcp.<service>, which the pod's DNS search path
	// completes (a plugin parameter: the binary takes the name only).
	ServiceSetting = discovery.Setting{Param: "service", Env: []string{"EPP_PEER_DNS_SERVICE"},
		Usage: "The headless Service, instead of the SRV name: the name is then _<portName>._tcp.<service>, which the pod's DNS search path completes."}
	// IntervalSetting is how often the name is looked up.
	IntervalSetting = discovery.Setting{Param: "interval", Flag: "epp-peer-dns-interval",
		Usage: "How often to look the name up (at least 1s)."}
	// ServerSetting is a DNS server to ask instead of the system's resolver.
	ServerSetting = discovery.Setting{Param: "server", Flag: "epp-peer-dns-server",
		Usage: `A DNS server to ask ("IP:port") instead of the system's resolver.`}
)

// Spec is the source for the epp binary (--epp-peer-dns=<SRV name>, with
// --epp-peer-dns-interval and --epp-peer-dns-server) and the EPP plugin
// dns-peer-discovery (parameters name or service, portName, namespace, interval,
// server). The replica recognizes itself in the answers by its addresses: POD_IP or
// POD_IPS is required.
func Spec() discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        SourceName,
		Select:      NameSetting,
		Placeholder: "_peer-sync._tcp.<headless Service>.<namespace>.svc",
		Reasons:     []string{ReasonLookup},
		Settings: func(b *discovery.Binder) discovery.Bound {
			var name, service, portName, server string
			interval := DefaultInterval
			b.String(&name, NameSetting, ValidateName)
			b.String(&service, ServiceSetting, nil)
			discovery.BindPortName(b, &portName)
			b.Duration(&interval, IntervalSetting, func(d time.Duration) error {
				if d < time.Second {
					return errors.New("want at least 1s")
				}
				return nil
			})
			b.String(&server, ServerSetting, func(s string) error {
				if _, err := netip.ParseAddrPort(s); err != nil {
					return errors.New("want an IP address and port, e.g. 10.96.0.10:53")
				}
				return nil
			})
			return discovery.Bound{
				Complete: func(self *peers.Self) error {
					named := b.Name(NameSetting)
					switch {
					case name != "" && service != "":
						return fmt.Errorf("%s and %s are mutually exclusive: set the SRV name, or the headless Service", named, b.Name(ServiceSetting))
					case name == "" && service == "":
						return fmt.Errorf("%s or %s is required: the SRV name of the peer port of a headless Service, _peer-sync._tcp.<service>.<namespace>.svc.cluster.local, or that Service", named, b.Name(ServiceSetting))
					case service != "":
						name = "_" + portName + "._tcp." + service
						if err := ValidateName(name); err != nil {
							return fmt.Errorf("invalid %s=%q: %w", b.Name(ServiceSetting), service, err)
						}
						named = b.Name(ServiceSetting)
					}
					if len(self.Addresses) == 0 {
						return fmt.Errorf("%s: this replica recognizes itself in DNS answers by its address: set POD_IP (fieldRef status.podIP) or POD_IPS (status.podIPs) from the downward API", named)
					}
					return nil
				},
				New: func(d discovery.Deps) (discovery.Source, error) {
					return NewSource(Config{Name: name, Namespace: d.Self.Namespace, Family: d.Self.Family(),
						Interval: interval, Resolver: Resolver(server)}, d.Publisher, d.Log), nil
				},
			}
		},
	}
}

// ValidateName checks an SRV name of the form _<port>._<proto>.<domain>; its error
// says why, without naming the setting.
func ValidateName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s: want the SRV name of the peer port of a headless Service, _<port name>._tcp.<service>.<namespace>.svc[.<cluster domain>]", why)
	}
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	if len(labels) < 3 {
		return bad("too few labels")
	}
	if !strings.HasPrefix(labels[0], "_") || len(labels[0]) < 2 {
		return bad("the first label is not _<port name>")
	}
	if labels[1] != "_tcp" && labels[1] != "_udp" {
		return bad("the second label is not _tcp or _udp")
	}
	if errs := validation.IsDNS1123Subdomain(strings.Join(labels[2:], ".")); len(errs) > 0 {
		return bad(strings.Join(errs, "; "))
	}
	return nil
}

// Resolver returns a resolver that asks server ("host:port"), or the system's
// resolver for "".
func Resolver(server string) *net.Resolver {
	if server == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}

// jitter returns d scaled by a random factor in [0.9, 1.1].
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}
