package peers

import (
	"fmt"
	"net/netip"
	"strings"
)

// Self is the replica that discovers its peers. Every source leaves it out of the
// peer set by the same rule (Is).
type Self struct {
	// Namespace and Name are the replica's Pod (POD_NAME, else the host name, in the
	// pool namespace). Name may be empty.
	Namespace string
	Name      string
	// Addresses are the replica's own IPs (POD_IP first, then POD_IPS), unmapped. The
	// first one's family is the preferred family for peers listed in several families.
	Addresses []netip.Addr
}

// Known reports whether anything identifies the replica.
func (s Self) Known() bool { return s.Name != "" || len(s.Addresses) > 0 }

// Family is 4 or 6, the family of the replica's first address, or 0 without one.
func (s Self) Family() int {
	if len(s.Addresses) == 0 {
		return 0
	}
	return FamilyOf(s.Addresses[0])
}

// IsName reports whether namespace/name is the replica's identity.
func (s Self) IsName(namespace, name string) bool {
	return s.Name != "" && namespace == s.Namespace && name == s.Name
}

// HasAddress reports whether the IP literal a is one of the replica's addresses.
func (s Self) HasAddress(a string) bool {
	if len(s.Addresses) == 0 {
		return false
	}
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, own := range s.Addresses {
		if ip == own.Unmap() {
			return true
		}
	}
	return false
}

// Is reports whether p is this replica: by identity (namespace/name) or by address.
func (s Self) Is(p PeerMetadata) bool {
	return s.IsName(p.Namespace, p.Name) || s.HasAddress(p.Address)
}

// Strings returns the addresses as strings, never nil.
func (s Self) Strings() []string {
	out := make([]string, 0, len(s.Addresses))
	for _, a := range s.Addresses {
		out = append(out, a.String())
	}
	return out
}

// FamilyOf is 4 for an IPv4 (or IPv4-mapped) address, else 6.
func FamilyOf(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// The downward-API variables SelfFromEnv reads: the pod's name (metadata.name), its
// IP (status.podIP) and its IPs (status.podIPs).
const (
	PodNameEnv = "POD_NAME"
	PodIPEnv   = "POD_IP"
	PodIPsEnv  = "POD_IPS"
)

// SelfFromEnv reads the replica's identity from the downward-API environment:
// POD_NAME, POD_IP and POD_IPS (comma separated). Without POD_NAME the name is the
// host name, which is the Pod's name in Kubernetes (hostname may be nil to skip
// that). POD_IP comes first in Addresses so that its family is the preferred one.
// The error names the variable at fault.
func SelfFromEnv(namespace string, getenv func(string) string, hostname func() (string, error)) (Self, error) {
	self := Self{Namespace: namespace, Name: strings.TrimSpace(getenv(PodNameEnv))}
	if self.Name == "" && hostname != nil {
		if h, err := hostname(); err == nil {
			self.Name = strings.TrimSpace(h)
		}
	}
	add := func(env, v string) error {
		v = strings.TrimSpace(v)
		if v == "" {
			return nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("invalid %s=%q: not an IP address (set it from the downward API: fieldRef status.podIP / status.podIPs)", env, v)
		}
		a = a.Unmap()
		for _, have := range self.Addresses {
			if have == a {
				return nil
			}
		}
		self.Addresses = append(self.Addresses, a)
		return nil
	}
	if err := add(PodIPEnv, getenv(PodIPEnv)); err != nil {
		return self, err
	}
	for _, v := range strings.Split(getenv(PodIPsEnv), ",") {
		if err := add(PodIPsEnv, v); err != nil {
			return self, err
		}
	}
	return self, nil
}
