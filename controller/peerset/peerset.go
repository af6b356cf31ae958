package peerset

import (
	"cmp"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Self is the replica that computes its peers.
type Self struct {
	// Name is the replica's Pod name (POD_NAME), in Config.Namespace. May be empty.
	Name string
	// Addresses are the replica's own IPs (POD_IP first, then POD_IPS). The first
	// one's family is the preferred family for peers listed in several families.
	Addresses []netip.Addr
}

// Config says which slices to read and how to turn them into peers.
type Config struct {
	// Namespace and Service select the slices: namespace and the
	// kubernetes.io/service-name label.
	Namespace string
	Service   string
	// PortName is the slice port whose number is each peer's port.
	PortName string
	// DefaultPort is used when a slice has no port named PortName.
	DefaultPort int32
	// Self is excluded from the result.
	Self Self
}

// candidate is one listing of an identity in one slice.
type candidate struct {
	addr  netip.Addr
	port  int32
	slice string
}

type identity struct {
	namespace, name string
}

type entry struct {
	excluded bool
	eligible bool      // best is set
	best     candidate // best eligible listing
}

// Compute returns the peers that the slices describe, ordered by ID. It implements
// the rules in the package documentation and is deterministic: any permutation of
// slices gives the same result.
func Compute(cfg Config, slices []discoveryv1.EndpointSlice) []peers.PeerMetadata {
	family := 0
	if len(cfg.Self.Addresses) > 0 {
		family = familyOf(cfg.Self.Addresses[0])
	}
	byID := map[identity]entry{}
	for i := range slices {
		s := &slices[i]
		if s.Namespace != cfg.Namespace || s.Labels[discoveryv1.LabelServiceName] != cfg.Service {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port := slicePort(s, cfg.PortName, cfg.DefaultPort)
		for j := range s.Endpoints {
			ep := &s.Endpoints[j]
			if len(ep.Addresses) == 0 {
				continue
			}
			id := identityOf(s, ep)
			e := byID[id]
			if id.namespace == cfg.Namespace && cfg.Self.Name != "" && id.name == cfg.Self.Name {
				e.excluded = true
			}
			if isSelfAddress(ep.Addresses, cfg.Self.Addresses) {
				e.excluded = true
			}
			if eligible(ep) {
				// The API server validates addresses; skip what it would reject.
				if addr, err := netip.ParseAddr(ep.Addresses[0]); err == nil && addr.Zone() == "" {
					c := candidate{addr: addr, port: port, slice: s.Name}
					if !e.eligible || better(c, e.best, family) {
						e.best, e.eligible = c, true
					}
				}
			}
			byID[id] = e
		}
	}
	out := make([]peers.PeerMetadata, 0, len(byID))
	for id, e := range byID {
		if e.excluded || !e.eligible {
			continue
		}
		out = append(out, peers.PeerMetadata{
			Namespace: id.namespace,
			Name:      id.name,
			Address:   e.best.addr.String(),
			Port:      e.best.port,
		})
	}
	peers.SortByID(out)
	return out
}

func identityOf(s *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint) identity {
	if ref := ep.TargetRef; ref != nil && ref.Name != "" {
		ns := ref.Namespace
		if ns == "" {
			ns = s.Namespace
		}
		return identity{namespace: ns, name: ref.Name}
	}
	return identity{namespace: s.Namespace, name: ep.Addresses[0]}
}

func eligible(ep *discoveryv1.Endpoint) bool {
	c := ep.Conditions
	return (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

// slicePort returns the number of the slice's port named name, else def.
func slicePort(s *discoveryv1.EndpointSlice, name string, def int32) int32 {
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == name && p.Port != nil {
			return *p.Port
		}
	}
	return def
}

func isSelfAddress(addrs []string, self []netip.Addr) bool {
	if len(self) == 0 {
		return false
	}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		for _, s := range self {
			if ip.Unmap() == s.Unmap() {
				return true
			}
		}
	}
	return false
}

// better reports whether a should be preferred over b: the replica's own family
// first, then the slice whose name sorts first, then (only for malformed input that
// lists one identity twice in a slice) the lower address and port.
func better(a, b candidate, family int) bool {
	if family != 0 {
		af, bf := familyOf(a.addr) == family, familyOf(b.addr) == family
		if af != bf {
			return af
		}
	}
	if c := cmp.Compare(a.slice, b.slice); c != 0 {
		return c < 0
	}
	if c := a.addr.Compare(b.addr); c != 0 {
		return c < 0
	}
	return a.port < b.port
}

func familyOf(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// IsSelf reports whether p is this replica: p's namespace is namespace and its name
// is s.Name, or p's address is one of s.Addresses. Sources other than EndpointSlices
// (a peers file) use it to leave the replica out as Compute does.
func (s Self) IsSelf(namespace string, p peers.PeerMetadata) bool {
	if s.Name != "" && p.Namespace == namespace && p.Name == s.Name {
		return true
	}
	if a, err := netip.ParseAddr(p.Address); err == nil {
		for _, own := range s.Addresses {
			if a.Unmap() == own.Unmap() {
				return true
			}
		}
	}
	return false
}
