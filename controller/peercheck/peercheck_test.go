package peercheck_test

import (
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peercheck"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

func TestReplicas(t *testing.T) {
	a := slicegen.Slice("epp-a", slicegen.Ports("http-metrics", 9090, "peer-sync", 9005),
		slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-0", "10.0.0.1"),
		slicegen.Pod("epp-2", "10.0.0.3", slicegen.NotReady()), slicegen.Pod("epp-3", "10.0.0.4", slicegen.TerminatingServing()))
	b := slicegen.Slice("epp-b", slicegen.IPv6(), slicegen.Ports("http-metrics", 9090), slicegen.Pod("epp-1", "fd00::2"), slicegen.Pod("epp-4", "fd00::5"))
	got, err := peercheck.Replicas([]discoveryv1.EndpointSlice{a, b}, "http-metrics")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, r := range got {
		s = append(s, r.ID+" "+r.URL)
	}
	want := []string{"ns/epp-0 http://10.0.0.1:9090/debug/peers", "ns/epp-1 http://10.0.0.2:9090/debug/peers", "ns/epp-4 http://[fd00::5]:9090/debug/peers"}
	if !slices.Equal(s, want) {
		t.Fatalf("replicas %q, want %q", s, want)
	}
	if _, err := peercheck.Replicas([]discoveryv1.EndpointSlice{a}, "http-peers"); err == nil || !strings.Contains(err.Error(), `"http-peers"`) ||
		!strings.Contains(err.Error(), "peer discovery is not deployed") {
		t.Fatalf("a slice without the port: %v", err)
	}

	// Membership alive: the not-ready endpoint (a leader-election standby) is a
	// replica too; the terminating one still is not.
	got, err = peercheck.ReplicasOf([]discoveryv1.EndpointSlice{a, b}, "http-metrics", peers.MembershipAlive)
	if err != nil {
		t.Fatal(err)
	}
	s = nil
	for _, r := range got {
		s = append(s, r.ID)
	}
	if want := []string{"ns/epp-0", "ns/epp-1", "ns/epp-2", "ns/epp-4"}; !slices.Equal(s, want) {
		t.Fatalf("alive: replicas %q, want %q", s, want)
	}
}

// TestLeaderElectionWithMembershipAlive: the chart's test of an EPP with leader
// election and membership alive, where the leader is the only ready endpoint and
// every replica lists the two others. Counted as ready replicas the leader's list
// is wrong ("peers [ns/epp-1 ns/epp-2], want []", as the chart's helm test failed);
// counted with the replicas' own membership all three agree.
func TestLeaderElectionWithMembershipAlive(t *testing.T) {
	sl := slicegen.Slice("epp-a", slicegen.Ports("http-peers", 9091),
		slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2", slicegen.NotReady()), slicegen.Pod("epp-2", "10.0.0.3", slicegen.NotReady()))
	docs := map[string]peers.Document{}
	for _, self := range []string{"ns/epp-0", "ns/epp-1", "ns/epp-2"} {
		d := peers.Document{Enabled: true, Synced: ptr.To(true), Peers: []peers.PeerEntry{}}
		for _, other := range []string{"ns/epp-0", "ns/epp-1", "ns/epp-2"} {
			if other != self {
				d.Peers = append(d.Peers, peers.PeerEntry{ID: other})
			}
		}
		docs[self] = d
	}
	o, err := peercheck.Flags([]string{"--service=epp", "--namespace=ns", "--port-name=http-peers", "--membership=alive"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := peercheck.ReplicasOf([]discoveryv1.EndpointSlice{sl}, o.PortName, o.Membership)
	if err != nil {
		t.Fatal(err)
	}
	if p := peercheck.Compare(rs, docs); p != nil || len(rs) != 3 {
		t.Fatalf("membership alive: %d replicas, problems %q; want 3 that agree", len(rs), p)
	}
	rs, err = peercheck.ReplicasOf([]discoveryv1.EndpointSlice{sl}, o.PortName, peers.MembershipReady)
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(peercheck.Compare(rs, docs), "; "); p != "ns/epp-0: peers [ns/epp-1 ns/epp-2], want []" {
		t.Fatalf("membership ready: problems %q", p)
	}
}

func TestCompare(t *testing.T) {
	rs := []peercheck.Replica{{ID: "ns/a"}, {ID: "ns/b"}, {ID: "ns/c"}}
	doc := func(synced bool, ids ...string) peers.Document {
		d := peers.Document{Enabled: true, Synced: ptr.To(synced), Peers: []peers.PeerEntry{}}
		for _, id := range ids {
			d.Peers = append(d.Peers, peers.PeerEntry{ID: id})
		}
		return d
	}
	all := map[string]peers.Document{"ns/a": doc(true, "ns/b", "ns/c"), "ns/b": doc(true, "ns/c", "ns/a"), "ns/c": doc(true, "ns/a", "ns/b")}
	if p := peercheck.Compare(rs, all); p != nil {
		t.Fatalf("agreeing replicas: %q", p)
	}
	bad := map[string]peers.Document{"ns/a": doc(true, "ns/b"), "ns/b": doc(false, "ns/a", "ns/c"), "ns/c": doc(true, "ns/a", "ns/b", "ns/c")}
	got := strings.Join(peercheck.Compare(rs, bad), "\n")
	for _, want := range []string{"ns/a: peers [ns/b], want [ns/b ns/c]", "ns/b: not synced", "ns/c: peers [ns/a ns/b ns/c], want [ns/a ns/b]"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	if p := peercheck.Compare(rs, map[string]peers.Document{}); len(p) != 3 {
		t.Fatalf("no documents: %q", p)
	}
}

func TestFlags(t *testing.T) {
	o, err := peercheck.Flags([]string{"--service=epp", "--namespace=ns", "--port-name=http-peers", "--timeout=30s"})
	if err != nil || o.Service != "epp" || o.Namespace != "ns" || o.PortName != "http-peers" || o.Timeout.Seconds() != 30 || o.Membership != peers.MembershipReady {
		t.Fatalf("Flags = %+v, %v", o, err)
	}
	if o, err := peercheck.Flags([]string{"--service=epp", "--namespace=ns", "--membership=alive"}); err != nil || o.Membership != peers.MembershipAlive {
		t.Fatalf("--membership=alive: %+v, %v", o, err)
	}
	if _, err := peercheck.Flags([]string{"--service=epp", "--namespace=ns", "--membership=leader"}); err == nil || !strings.Contains(err.Error(), "--membership") {
		t.Fatalf("--membership=leader: %v, want an error naming the flag", err)
	}
	for _, bad := range [][]string{{"--service=epp"}, {"--service=epp", "--namespace=ns", "--timeout=0s"}, {"--service=epp", "--namespace=ns", "extra"}, {"--servce=epp"}} {
		if _, err := peercheck.Flags(bad); err == nil || !strings.HasPrefix(err.Error(), "check-peers: ") {
			t.Errorf("Flags(%q) = %v, want a check-peers error", bad, err)
		}
	}
}
