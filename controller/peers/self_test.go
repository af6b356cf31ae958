package peers_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSelfFromEnv(t *testing.T) {
	host := func(name string) func() (string, error) { return func() (string, error) { return name, nil } }
	noHost := func() (string, error) { return "", errors.New("no host name") }
	tests := []struct {
		name     string
		env      func(string) string
		hostname func() (string, error)
		want     peers.Self
		wantErr  string
		known    bool
	}{
		{"POD_NAME, POD_IP then POD_IPS without duplicates", envOf("POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "POD_IPS", "10.0.0.1, fd00::1"), host("ignored"),
			peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}}, "", true},
		{"the host name without POD_NAME", envOf("POD_IP", "10.0.0.1"), host("epp-6f7c-abcde\n"),
			peers.Self{Namespace: "ns", Name: "epp-6f7c-abcde", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, "", true},
		{"nothing at all", envOf(), noHost, peers.Self{Namespace: "ns"}, "", false},
		{"only the host name", envOf(), host("epp-1"), peers.Self{Namespace: "ns", Name: "epp-1"}, "", true},
		{"IPv4-mapped is unmapped", envOf("POD_IP", "::ffff:10.0.0.1"), nil,
			peers.Self{Namespace: "ns", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, "", true},
		{"bad POD_IP", envOf("POD_IP", "10.0.0"), nil, peers.Self{}, `invalid POD_IP="10.0.0"`, false},
		{"zone in POD_IPS", envOf("POD_IPS", "fe80::1%eth0"), nil, peers.Self{}, `invalid POD_IPS="fe80::1%eth0"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := peers.SelfFromEnv("ns", tc.env, tc.hostname)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "downward API") {
					t.Fatalf("error %v, want one naming %s and the downward API", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if got.Known() != tc.known {
				t.Fatalf("Known() = %v, want %v", got.Known(), tc.known)
			}
		})
	}
}

func TestSelfIs(t *testing.T) {
	self := peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}}
	tests := []struct {
		p    peers.PeerMetadata
		want bool
	}{
		{peers.PeerMetadata{Namespace: "ns", Name: "epp-0", Address: "10.9.9.9"}, true},     // by name
		{peers.PeerMetadata{Namespace: "other", Name: "epp-0", Address: "10.9.9.9"}, false}, // same name elsewhere
		{peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "fd00:0::1"}, true},    // by address, any spelling
		{peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "::ffff:10.0.0.1"}, true},
		{peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2"}, false},
	}
	for _, tc := range tests {
		if got := self.Is(tc.p); got != tc.want {
			t.Errorf("Is(%s at %s) = %v, want %v", tc.p.ID(), tc.p.Address, got, tc.want)
		}
	}
	if (peers.Self{}).Is(peers.PeerMetadata{Namespace: "", Name: ""}) {
		t.Error("an unknown self matched an empty peer")
	}
	if f := self.Family(); f != 4 {
		t.Errorf("Family() = %d, want 4 (POD_IP's)", f)
	}
}

func TestMembership(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want peers.Membership
	}{{"", peers.MembershipReady}, {"ready", peers.MembershipReady}, {"alive", peers.MembershipAlive}} {
		if got, err := peers.ParseMembership(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseMembership(%q) = %q, %v", tc.in, got, err)
		}
	}
	if _, err := peers.ParseMembership("Ready"); err == nil {
		t.Error("ParseMembership accepted Ready")
	}
	table := []struct {
		ready, terminating bool
		byReady, byAlive   bool // what each membership admits
	}{
		{true, false, true, true},
		{false, false, false, true},
		{true, true, false, false},
		{false, true, false, false},
	}
	for _, tc := range table {
		if got := peers.MembershipReady.Admits(tc.ready, tc.terminating); got != tc.byReady {
			t.Errorf("ready.Admits(ready=%v, terminating=%v) = %v", tc.ready, tc.terminating, got)
		}
		if got := peers.MembershipAlive.Admits(tc.ready, tc.terminating); got != tc.byAlive {
			t.Errorf("alive.Admits(ready=%v, terminating=%v) = %v", tc.ready, tc.terminating, got)
		}
	}
}
