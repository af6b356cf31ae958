package peerset

import (
	"cmp"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

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
	// Membership says which endpoints are peers ("" is peers.MembershipReady).
	Membership peers.Membership
	// Self is excluded from the result. An empty Self.Namespace means Namespace.
	Self peers.Self
}

// candidate is one listing of an identity in one slice.
type candidate struct {
	addr  netip.Addr
	port  int32
	slice string
	conds conditions
}

// conditions of an endpoint, with unknown values resolved: ready and serving count
// as true (serving as ready), terminating as false.
type conditions struct {
	ready, serving, terminating bool
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
	self := cfg.Self
	if self.Namespace == "" {
		self.Namespace = cfg.Namespace
	}
	family := self.Family()
	membership := cfg.Membership
	if membership == "" {
		membership = peers.MembershipReady
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
			if self.IsName(id.namespace, id.name) || isSelfAddress(ep.Addresses, self) {
				e.excluded = true
			}
			if conds := conditionsOf(ep); membership.Admits(conds.ready, conds.terminating) {
				// The API server validates addresses; skip what it would reject.
				if addr, err := netip.ParseAddr(ep.Addresses[0]); err == nil && addr.Zone() == "" {
					c := candidate{addr: addr, port: port, slice: s.Name, conds: conds}
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
			Namespace:   id.namespace,
			Name:        id.name,
			Address:     e.best.addr.String(),
			Port:        e.best.port,
			Ready:       e.best.conds.ready,
			Serving:     e.best.conds.serving,
			Terminating: e.best.conds.terminating,
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

func conditionsOf(ep *discoveryv1.Endpoint) conditions {
	c := ep.Conditions
	out := conditions{ready: c.Ready == nil || *c.Ready, terminating: c.Terminating != nil && *c.Terminating}
	out.serving = out.ready
	if c.Serving != nil {
		out.serving = *c.Serving
	}
	return out
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

func isSelfAddress(addrs []string, self peers.Self) bool {
	for _, a := range addrs {
		if self.HasAddress(a) {
			return true
		}
	}
	return false
}

// better reports whether a should be preferred over b: the replica's own family
// first, then the slice whose name sorts first, then (only for malformed input that
// lists one identity twice in a slice) the lower address and port, and the more
// ready conditions.
func better(a, b candidate, family int) bool {
	if family != 0 {
		af, bf := peers.FamilyOf(a.addr) == family, peers.FamilyOf(b.addr) == family
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
	if a.port != b.port {
		return a.port < b.port
	}
	return a.conds.rank() > b.conds.rank()
}

// rank orders conditions for the last tie-break: ready, then serving, then not
// terminating, count for more.
func (c conditions) rank() int {
	r := 0
	if c.ready {
		r += 4
	}
	if c.serving {
		r += 2
	}
	if !c.terminating {
		r++
	}
	return r
}
