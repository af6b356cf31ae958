package dnssrv

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
)

// SourceName is the source's name (/debug/peers "source").
const SourceName = "dns"

// Spec is the source as the epp binary knows it: --epp-peer-dns=<SRV name>, with
// --epp-peer-dns-interval and --epp-peer-dns-server of its own.
func Spec() discovery.SourceSpec {
	var interval time.Duration
	var server string
	return discovery.SourceSpec{
		Name:        SourceName,
		Flag:        "epp-peer-dns",
		Placeholder: "_peer-sync._tcp.<headless Service>.<namespace>.svc",
		Usage:       "SRV name of the peer port of a headless Service (_peer-sync._tcp.<service>.<namespace>.svc.cluster.local); DNS is the peer source, no RBAC needed.",
		Reasons:     []string{ReasonLookup},
		Flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&interval, "epp-peer-dns-interval", DefaultInterval, "With --epp-peer-dns: how often to look the name up (at least 1s).")
			fs.StringVar(&server, "epp-peer-dns-server", "", `With --epp-peer-dns: ask this DNS server ("host:port") instead of the system's resolver.`)
		},
		Complete: func(s *discovery.Settings) error {
			if err := ValidateName(s.Arg); err != nil {
				return err
			}
			if interval < time.Second {
				return fmt.Errorf("--epp-peer-dns-interval=%v: want at least 1s", interval)
			}
			if server != "" {
				if _, err := netip.ParseAddrPort(server); err != nil {
					return fmt.Errorf("--epp-peer-dns-server=%q: want an IP address and port, e.g. 10.96.0.10:53", server)
				}
			}
			if len(s.Self.Addresses) == 0 {
				return fmt.Errorf("--epp-peer-dns: this replica recognizes itself in DNS answers by its address: set POD_IP (fieldRef status.podIP) or POD_IPS (status.podIPs) from the downward API")
			}
			return nil
		},
		New: func(d discovery.Deps) (discovery.Source, error) {
			return NewSource(Config{Name: d.Arg, Namespace: d.Self.Namespace, Family: d.Self.Family(),
				Interval: interval, Resolver: Resolver(server)}, d.Publisher, d.Log), nil
		},
	}
}

// ValidateName checks an SRV name of the form _<port>._<proto>.<domain>.
func ValidateName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("--epp-peer-dns=%q: %s: want the SRV name of the peer port of a headless Service, _<port name>._tcp.<service>.<namespace>.svc[.<cluster domain>]", name, why)
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
