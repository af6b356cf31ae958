package peerset_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

var (
	pod    = slicegen.Pod
	slice  = slicegen.Slice
	ipv6   = slicegen.IPv6
	ports  = slicegen.Ports
	selfV4 = peers.Self{Name: "epp-0", Addresses: addrs("10.0.0.1")}
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func peer(name, addr string, port int32) peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: "ns", Name: name, Address: addr, Port: port, Ready: true, Serving: true}
}

func config(self peers.Self) peerset.Config {
	return peerset.Config{Namespace: "ns", Service: "epp", PortName: "peer-sync", DefaultPort: 9005, Self: self}
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name   string
		self   peers.Self
		slices []discoveryv1.EndpointSlice
		want   []peers.PeerMetadata
	}{
		{
			name: "no slices: no peers",
			self: selfV4,
			want: []peers.PeerMetadata{},
		},
		{
			name: "ready peers of the Service, ordered by id, self excluded",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-2", "10.0.0.3"), pod("epp-0", "10.0.0.1"), pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005), peer("epp-2", "10.0.0.3", 9005)},
		},
		{
			name: "rule 1: slices of another Service, another namespace or without the label are ignored",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("other", slicegen.Service("other"), pod("o-1", "10.0.1.1")),
				slice("epp-x", slicegen.Namespace("elsewhere"), pod("epp-9", "10.0.1.2")),
				slice("unlabelled", slicegen.NoServiceLabel(), pod("u-1", "10.0.1.3")),
				slice("epp-a", pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 2: FQDN slices are ignored",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("epp-fqdn", slicegen.AddressType(discoveryv1.AddressTypeFQDN), pod("epp-3", "epp-3.example")),
				slice("epp-a", pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name:   "rule 2: an IPv6-only Service gives IPv6 peers, printed without brackets",
			self:   peers.Self{Name: "epp-0", Addresses: addrs("fd00::1")},
			slices: []discoveryv1.EndpointSlice{slice("epp-a", ipv6(), pod("epp-1", "fd00:0:0::2"))},
			want:   []peers.PeerMetadata{peer("epp-1", "fd00::2", 9005)},
		},
		{
			name: "rule 3: ready nil counts as ready",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-1", "10.0.0.2", slicegen.ReadyUnknown()))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 3: not ready is not a peer",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-1", "10.0.0.2", slicegen.NotReady()), pod("epp-2", "10.0.0.3"))},
			want: []peers.PeerMetadata{peer("epp-2", "10.0.0.3", 9005)},
		},
		{
			name: "rule 3: terminating with ready true is not a peer",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-1", "10.0.0.2", slicegen.Terminating()), pod("epp-2", "10.0.0.3", slicegen.ReadyUnknown(), slicegen.Terminating()))},
			want: []peers.PeerMetadata{},
		},
		{
			name: "rule 3: an endpoint without addresses is not a peer",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				slicegen.Endpoint("epp-1", nil), pod("epp-2", "10.0.0.3"))},
			want: []peers.PeerMetadata{peer("epp-2", "10.0.0.3", 9005)},
		},
		{
			name: "rule 4: an endpoint without targetRef is namespace/first address",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				slicegen.Endpoint("", []string{"10.0.0.7", "10.0.0.8"}))},
			want: []peers.PeerMetadata{peer("10.0.0.7", "10.0.0.7", 9005)},
		},
		{
			name: "rule 4: targetRef without namespace takes the slice's, with one keeps its own",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-1", "10.0.0.2", slicegen.RefNamespace("")),
				pod("epp-2", "10.0.0.3", slicegen.RefNamespace("team-b")))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005),
				{Namespace: "team-b", Name: "epp-2", Address: "10.0.0.3", Port: 9005, Ready: true, Serving: true}},
		},
		{
			name: "rule 4: an endpoint with several addresses uses the first",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				slicegen.Endpoint("epp-1", []string{"10.0.0.2", "10.0.0.20"}))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 4: the same pod in an IPv4 and an IPv6 slice is one peer with self's family (IPv4)",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a6", ipv6(), pod("epp-1", "fd00::2")),
				slice("epp-b4", pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 4: the same pod in an IPv4 and an IPv6 slice is one peer with self's family (IPv6)",
			self: peers.Self{Name: "epp-0", Addresses: addrs("fd00::1", "10.0.0.1")},
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a4", pod("epp-1", "10.0.0.2")),
				slice("epp-b6", ipv6(), pod("epp-1", "fd00::2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "fd00::2", 9005)},
		},
		{
			name: "rule 4: self's family unknown (only POD_NAME): the slice whose name sorts first wins",
			self: peers.Self{Name: "epp-0"},
			slices: []discoveryv1.EndpointSlice{
				slice("epp-b4", pod("epp-1", "10.0.0.2")),
				slice("epp-a6", ipv6(), pod("epp-1", "fd00::2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "fd00::2", 9005)},
		},
		{
			name: "rule 4: the same pod in two slices with different readiness is a peer, from the ready one",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a", ports("peer-sync", 7001), pod("epp-1", "10.0.0.2", slicegen.NotReady())),
				slice("epp-b", ports("peer-sync", 7002), pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 7002)},
		},
		{
			name: "rule 4: a pod moving between slices: both ready, the first slice name wins",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("epp-z", ports("peer-sync", 7002), pod("epp-1", "10.0.0.2")),
				slice("epp-m", ports("peer-sync", 7001), pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 7001)},
		},
		{
			name: "rule 5: self excluded by name even with an unknown address",
			self: peers.Self{Name: "epp-0"},
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-0", "10.0.0.9"), pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 5: a pod of the same name in another namespace is not self",
			self: peers.Self{Name: "epp-0"},
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-0", "10.0.0.9", slicegen.RefNamespace("other")))},
			want: []peers.PeerMetadata{{Namespace: "other", Name: "epp-0", Address: "10.0.0.9", Port: 9005, Ready: true, Serving: true}},
		},
		{
			name: "rule 5: self excluded by POD_IP without a name",
			self: peers.Self{Addresses: addrs("10.0.0.1")},
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				pod("epp-0", "10.0.0.1"), pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 5: self excluded by its second IP (POD_IPS), in every slice and family",
			self: peers.Self{Addresses: addrs("10.0.0.1", "fd00::1")},
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a4", pod("epp-0", "10.0.0.99"), pod("epp-1", "10.0.0.2")),
				slice("epp-b6", ipv6(), pod("epp-0", "fd00::1"), pod("epp-1", "fd00::2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 5: self excluded by a non-first address of an endpoint without targetRef",
			self: peers.Self{Addresses: addrs("10.0.0.1")},
			slices: []discoveryv1.EndpointSlice{slice("epp-a",
				slicegen.Endpoint("", []string{"10.0.0.50", "10.0.0.1"}))},
			want: []peers.PeerMetadata{},
		},
		{
			name: "rule 5: a not-ready listing with self's address still excludes the identity",
			self: peers.Self{Addresses: addrs("10.0.0.1")},
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a", pod("epp-7", "10.0.0.1", slicegen.NotReady())),
				slice("epp-b", pod("epp-7", "10.0.0.70")),
			},
			want: []peers.PeerMetadata{},
		},
		{
			name: "rule 6: the named port",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a", ports("http", 8080, "peer-sync", 7005),
				pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 7005)},
		},
		{
			name: "rule 6: a slice lacking the named port uses the default",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a", ports("http", 8080),
				pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 6: ports null uses the default",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{slice("epp-a", slicegen.NilPorts(),
				pod("epp-1", "10.0.0.2"))},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
		{
			name: "rule 6: endpoints null is valid and contributes nothing",
			self: selfV4,
			slices: []discoveryv1.EndpointSlice{
				slice("epp-a", slicegen.NilEndpoints()),
				slice("epp-b", pod("epp-1", "10.0.0.2")),
			},
			want: []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(tc.self)
			got := peerset.Compute(cfg, tc.slices)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("peers (-want +got):\n%s", diff)
			}
			forEachPermutation(tc.slices, func(perm []discoveryv1.EndpointSlice) {
				if diff := cmp.Diff(tc.want, peerset.Compute(cfg, perm)); diff != "" {
					t.Fatalf("order of slices %v changed the result (-want +got):\n%s", names(perm), diff)
				}
			})
		})
	}
}

// TestComputeMembership covers --epp-peer-membership: ready (the default, rule 3
// unchanged) against alive (standbys that are not ready count too), and the
// conditions each peer reports.
func TestComputeMembership(t *testing.T) {
	standby := func(name, addr string) peers.PeerMetadata {
		p := peer(name, addr, 9005)
		p.Ready, p.Serving = false, false
		return p
	}
	in := []discoveryv1.EndpointSlice{slice("epp-a",
		pod("epp-1", "10.0.0.2"),                                // the leader: ready
		pod("epp-2", "10.0.0.3", slicegen.NotReady()),           // a standby
		pod("epp-3", "10.0.0.4", slicegen.ReadyUnknown()),       // unknown readiness counts as ready
		pod("epp-4", "10.0.0.5", slicegen.TerminatingServing()), // shutting down, still serving
		pod("epp-5", "10.0.0.6", slicegen.NotReady(), slicegen.Terminating()),
		pod("epp-0", "10.0.0.1", slicegen.NotReady()), // self, not ready
	)}
	unknown := peer("epp-3", "10.0.0.4", 9005)
	unknown.Serving = true
	tests := []struct {
		membership peers.Membership
		want       []peers.PeerMetadata
	}{
		{"", []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005), unknown}},
		{peers.MembershipReady, []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005), unknown}},
		{peers.MembershipAlive, []peers.PeerMetadata{peer("epp-1", "10.0.0.2", 9005), standby("epp-2", "10.0.0.3"), unknown}},
	}
	for _, tc := range tests {
		t.Run(string(tc.membership), func(t *testing.T) {
			cfg := config(selfV4)
			cfg.Membership = tc.membership
			if diff := cmp.Diff(tc.want, peerset.Compute(cfg, in)); diff != "" {
				t.Fatalf("peers (-want +got):\n%s", diff)
			}
		})
	}

	// A pod not ready in its IPv4 slice and ready in its IPv6 slice: with alive it
	// is one peer, in self's family, with that listing's conditions.
	dual := []discoveryv1.EndpointSlice{
		slice("epp-a", pod("epp-1", "10.0.0.2", slicegen.NotReady())),
		slice("epp-b", ipv6(), pod("epp-1", "fd00::2")),
	}
	cfg := config(selfV4)
	cfg.Membership = peers.MembershipAlive
	if diff := cmp.Diff([]peers.PeerMetadata{standby("epp-1", "10.0.0.2")}, peerset.Compute(cfg, dual)); diff != "" {
		t.Fatalf("alive, dual stack (-want +got):\n%s", diff)
	}
	cfg.Membership = peers.MembershipReady
	if diff := cmp.Diff([]peers.PeerMetadata{peer("epp-1", "fd00::2", 9005)}, peerset.Compute(cfg, dual)); diff != "" {
		t.Fatalf("ready, dual stack (-want +got):\n%s", diff)
	}
}

func TestComputeDoesNotModifyInput(t *testing.T) {
	in := []discoveryv1.EndpointSlice{slice("epp-b", pod("epp-1", "10.0.0.2")), slice("epp-a", ipv6(), pod("epp-1", "fd00::2"))}
	before := []discoveryv1.EndpointSlice{*in[0].DeepCopy(), *in[1].DeepCopy()}
	peerset.Compute(config(selfV4), in)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("Compute modified its input:\n%s", diff)
	}
}

func names(s []discoveryv1.EndpointSlice) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].Name
	}
	return out
}

// forEachPermutation calls f with every ordering of s (Heap's algorithm).
func forEachPermutation(s []discoveryv1.EndpointSlice, f func([]discoveryv1.EndpointSlice)) {
	a := slices.Clone(s)
	var gen func(k int)
	gen = func(k int) {
		if k <= 1 {
			f(a)
			return
		}
		for i := 0; i < k; i++ {
			gen(k - 1)
			if k%2 == 0 {
				a[i], a[k-1] = a[k-1], a[i]
			} else {
				a[0], a[k-1] = a[k-1], a[0]
			}
		}
	}
	gen(len(a))
}
