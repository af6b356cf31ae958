package peerset_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// byteReader hands out fuzz input a byte at a time; past the end it returns zeros.
type byteReader struct{ b []byte }

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *byteReader) pick(n int) int { return int(r.next()) % n }

var (
	fuzzPods  = []string{"", "epp-0", "epp-1", "epp-2", "epp-3"}
	fuzzAddrs = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2", "fd00:0::3", "::ffff:10.0.0.4", "not-an-ip", "fe80::1%eth0", ""}
	fuzzNS    = []string{"ns", "ns", "ns", "other", ""}
	fuzzSvc   = []string{"epp", "epp", "epp", "other"}
	fuzzTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN, "bogus"}
	fuzzBools = []*bool{nil, ptr.To(true), ptr.To(false)}
)

// slicesFromBytes turns arbitrary bytes into a list of slices that mixes valid,
// odd and invalid input: shared identities, self's name and addresses, every
// readiness combination, missing ports, other Services and namespaces.
func slicesFromBytes(data []byte) []discoveryv1.EndpointSlice {
	r := &byteReader{b: data}
	n := r.pick(6)
	out := make([]discoveryv1.EndpointSlice, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, genSlice(r))
	}
	return out
}

// genSlice reads one slice from r.
func genSlice(r *byteReader) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("epp-%c", 'a'+r.pick(4)),
			Namespace: fuzzNS[r.pick(len(fuzzNS))],
			Labels:    map[string]string{discoveryv1.LabelServiceName: fuzzSvc[r.pick(len(fuzzSvc))]},
		},
		AddressType: fuzzTypes[r.pick(len(fuzzTypes))],
	}
	switch r.pick(4) {
	case 0: // ports: null
	case 1:
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("peer-sync"), Port: ptr.To(int32(7000 + r.pick(3)))}}
	case 2:
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}, {Name: ptr.To("peer-sync")}}
	case 3:
		s.Ports = []discoveryv1.EndpointPort{{Port: ptr.To[int32](1)}}
	}
	if r.pick(8) == 0 {
		s.Endpoints = nil
	}
	for e := r.pick(5); e > 0; e-- {
		ep := discoveryv1.Endpoint{
			Conditions: discoveryv1.EndpointConditions{
				Ready:       fuzzBools[r.pick(3)],
				Serving:     fuzzBools[r.pick(3)],
				Terminating: fuzzBools[r.pick(3)],
			},
		}
		for a := r.pick(3); a > 0; a-- {
			ep.Addresses = append(ep.Addresses, fuzzAddrs[r.pick(len(fuzzAddrs))])
		}
		if p := fuzzPods[r.pick(len(fuzzPods))]; p != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: p, Namespace: fuzzNS[r.pick(len(fuzzNS))]}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// fuzzConfig is the Config a fuzz input's selfByte picks: the replica's name (bit 0),
// an IPv4 and an IPv6 address (bits 1, 2) in either order (bit 3), and membership
// alive (bit 4).
func fuzzConfig(selfByte byte) peerset.Config {
	self := peers.Self{}
	if selfByte&1 != 0 {
		self.Name = "epp-0"
	}
	if selfByte&2 != 0 {
		self.Addresses = append(self.Addresses, netip.MustParseAddr("10.0.0.1"))
	}
	if selfByte&4 != 0 {
		self.Addresses = append(self.Addresses, netip.MustParseAddr("fd00::1"))
	}
	if selfByte&8 != 0 {
		slices.Reverse(self.Addresses)
	}
	cfg := config(self)
	cfg.Membership = peers.MembershipReady
	if selfByte&16 != 0 {
		cfg.Membership = peers.MembershipAlive
	}
	return cfg
}

func FuzzCompute(f *testing.F) {
	f.Add([]byte{}, byte(0))
	f.Add([]byte{3, 0, 0, 0, 0, 1, 1, 2, 1, 1, 1, 0, 1, 2, 2, 1, 1, 1, 3, 1, 0}, byte(3))
	f.Add([]byte{5, 1, 0, 0, 1, 1, 1, 4, 0, 0, 2, 3, 4, 1, 1, 2, 2, 1, 2, 0, 0, 9, 9, 1, 1}, byte(15))
	f.Add([]byte("the same pod in many slices of every family and readiness"), byte(6))
	f.Fuzz(func(t *testing.T, data []byte, selfByte byte) {
		in := slicesFromBytes(data)
		cfg := fuzzConfig(selfByte)
		self := cfg.Self
		got := peerset.Compute(cfg, in)

		// No self, no duplicate identities, sorted, plain IP addresses.
		for i, p := range got {
			if i > 0 && got[i-1].ID() >= p.ID() {
				t.Fatalf("peers not strictly ordered by id: %q then %q", got[i-1].ID(), p.ID())
			}
			if self.Name != "" && p.Namespace == "ns" && p.Name == self.Name {
				t.Fatalf("self %q is among its peers: %+v", self.Name, got)
			}
			a, err := netip.ParseAddr(p.Address)
			if err != nil || a.String() != p.Address {
				t.Fatalf("peer %s has address %q, want a canonical plain IP", p.ID(), p.Address)
			}
			for _, s := range self.Addresses {
				if a.Unmap() == s {
					t.Fatalf("peer %s has self's address %s", p.ID(), s)
				}
			}
			if p.Port < 1 {
				t.Fatalf("peer %s has port %d", p.ID(), p.Port)
			}
			if p.Terminating || (cfg.Membership == peers.MembershipReady && !p.Ready) {
				t.Fatalf("peer %s with ready=%v terminating=%v under membership %q", p.ID(), p.Ready, p.Terminating, cfg.Membership)
			}
		}
		// Order independence: reversing and rotating the input changes nothing.
		rev := slices.Clone(in)
		slices.Reverse(rev)
		if diff := cmp.Diff(got, peerset.Compute(cfg, rev)); diff != "" {
			t.Fatalf("reversed input changed the result:\n%s", diff)
		}
		if len(in) > 1 {
			rot := append(slices.Clone(in[1:]), in[0])
			if diff := cmp.Diff(got, peerset.Compute(cfg, rot)); diff != "" {
				t.Fatalf("rotated input changed the result:\n%s", diff)
			}
		}
		// Exactly the identities a plain set model predicts: eligible somewhere, and
		// never named or addressed like self anywhere.
		var gotIDs []string
		for _, p := range got {
			gotIDs = append(gotIDs, p.ID())
		}
		if diff := cmp.Diff(modelIDs(cfg, in), gotIDs); diff != "" {
			t.Fatalf("peer ids differ from the set model (-model +got):\n%s", diff)
		}
	})
}

// modelIDs is a deliberately naive restatement of the peer rules 1-5 of
// docs/ARCHITECTURE.md as set algebra.
func modelIDs(cfg peerset.Config, in []discoveryv1.EndpointSlice) []string {
	eligibleIDs := map[string]bool{}
	selfIDs := map[string]bool{}
	for _, s := range in {
		if s.Namespace != cfg.Namespace || s.Labels[discoveryv1.LabelServiceName] != cfg.Service ||
			(s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			ns, name := s.Namespace, ep.Addresses[0]
			if ep.TargetRef != nil && ep.TargetRef.Name != "" {
				name = ep.TargetRef.Name
				if ep.TargetRef.Namespace != "" {
					ns = ep.TargetRef.Namespace
				}
			}
			id := ns + "/" + name
			if ns == cfg.Namespace && cfg.Self.Name != "" && name == cfg.Self.Name {
				selfIDs[id] = true
			}
			for _, a := range ep.Addresses {
				for _, s := range cfg.Self.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil && ip.Unmap() == s {
						selfIDs[id] = true
					}
				}
			}
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			first, err := netip.ParseAddr(ep.Addresses[0])
			if (ready || cfg.Membership == peers.MembershipAlive) && !terminating && err == nil && first.Zone() == "" {
				eligibleIDs[id] = true
			}
		}
	}
	var out []string
	for id := range eligibleIDs {
		if !selfIDs[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
