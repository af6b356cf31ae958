package dnssrv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/dnssrv"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

const name = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"

// target is the host name CoreDNS gives an endpoint of a headless Service.
func target(dashed string) string { return dashed + ".epp-peers.ns.svc.cluster.local" }

type running struct {
	pub   *discovery.Publisher
	store *peers.MemoryPeerStore
	dns   *dnsserver.Server
}

// start runs the source as replica 10.0.0.1 (family 4 unless self says otherwise)
// against a DNS server of the test's own, looking up every 50 ms.
func start(t *testing.T, self peers.Self, prepare func(*dnsserver.Server)) running {
	t.Helper()
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if prepare != nil {
		prepare(srv)
	}
	store := peers.NewMemoryPeerStore()
	pub := discovery.NewPublisher(dnssrv.SourceName, store, testr.New(t),
		discovery.PublisherOptions{Instance: t.Name(), Self: self, Reasons: []string{dnssrv.ReasonLookup}})
	src := dnssrv.NewSource(dnssrv.Config{Name: name, Namespace: "ns", Family: self.Family(),
		Interval: 50 * time.Millisecond, Timeout: 300 * time.Millisecond, Resolver: dnssrv.Resolver(srv.Addr())}, pub, testr.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return 5 s after its context ended")
		}
	})
	return running{pub: pub, store: store, dns: srv}
}

var self = peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}

func list(ps []peers.PeerMetadata) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID()+"@"+p.HostPort())
	}
	return strings.Join(out, ",")
}

func (r running) wait(t *testing.T, step, want string) {
	t.Helper()
	wait.For(t, 5*time.Second, func() string {
		if got := list(r.store.Peers()); got != want {
			return fmt.Sprintf("%s: peers %q, want %q (last error %v)", step, got, want, r.pub.LastError())
		}
		return ""
	})
}

func endpoints(s *dnsserver.Server, addrs ...string) {
	var recs []dnsserver.SRV
	for _, a := range addrs {
		dashed := strings.NewReplacer(".", "-", ":", "-").Replace(a)
		s.SetAddrs(target(dashed), a)
		recs = append(recs, dnsserver.SRV{Target: target(dashed), Port: 9005})
	}
	s.SetSRV(name, recs...)
}

func TestPeersFromSRVRecords(t *testing.T) {
	r := start(t, self, func(s *dnsserver.Server) { endpoints(s, "10.0.0.1", "10.0.0.3", "10.0.0.2") })
	// Self (10.0.0.1) is left out; the others by their target's first label, ordered.
	r.wait(t, "initial", "ns/10-0-0-2@10.0.0.2:9005,ns/10-0-0-3@10.0.0.3:9005")
	// The peers are in the store a moment before the publisher says it is synced.
	wait.Until(t, 5*time.Second, "synced after the first answer", r.pub.Synced)
	// A StatefulSet's Pods have host names: those are the identities.
	r.dns.SetAddrs(target("epp-4"), "10.0.0.5")
	r.dns.SetSRV(name, dnsserver.SRV{Target: target("10-0-0-1"), Port: 9005}, dnsserver.SRV{Target: target("10-0-0-2"), Port: 9005},
		dnsserver.SRV{Target: target("epp-4"), Port: 7000})
	r.wait(t, "one left, one joined", "ns/10-0-0-2@10.0.0.2:9005,ns/epp-4@10.0.0.5:7000")
	// A target whose address vanished since the SRV answer is skipped.
	r.dns.SetAddrs(target("epp-4"))
	r.wait(t, "a target without an address", "ns/10-0-0-2@10.0.0.2:9005")
}

// TestSelfListedByTheRecords: the records list the ready pods, this replica's too
// once it is ready: until then (and after it stops being ready) it is not listed,
// and a syncer waits before it dials peers that would refuse it.
func TestSelfListedByTheRecords(t *testing.T) {
	r := start(t, self, func(s *dnsserver.Server) { endpoints(s, "10.0.0.2") })
	r.wait(t, "not ready yet", "ns/10-0-0-2@10.0.0.2:9005")
	if listed, _ := r.pub.SelfListed(); listed {
		t.Fatal("listed while the records do not name this replica")
	}
	endpoints(r.dns, "10.0.0.1", "10.0.0.2")
	wait.Until(t, 5*time.Second, "this replica listed", func() bool { listed, _ := r.pub.SelfListed(); return listed })
	endpoints(r.dns, "10.0.0.2")
	wait.Until(t, 5*time.Second, "this replica no longer listed", func() bool { listed, _ := r.pub.SelfListed(); return !listed })
}

// TestNoSuchNameIsNoPeers: a headless Service without ready endpoints does not
// exist in DNS; that is an answer (no peers), not a failure.
func TestNoSuchNameIsNoPeers(t *testing.T) {
	r := start(t, self, nil)
	wait.Until(t, 5*time.Second, "synced", r.pub.Synced)
	if n := len(r.store.Peers()); n != 0 || r.pub.LastError() != nil {
		t.Fatalf("%d peers, error %v", n, r.pub.LastError())
	}
	endpoints(r.dns, "10.0.0.1", "10.0.0.2")
	r.wait(t, "the first peer", "ns/10-0-0-2@10.0.0.2:9005")
}

func TestPreferredFamily(t *testing.T) {
	prepare := func(s *dnsserver.Server) {
		s.SetAddrs(target("epp-1"), "10.0.0.2", "fd00::2")
		s.SetSRV(name, dnsserver.SRV{Target: target("epp-1"), Port: 9005})
	}
	start(t, self, prepare).wait(t, "IPv4 replica", "ns/epp-1@10.0.0.2:9005")
	self6 := peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("fd00::1")}}
	start(t, self6, prepare).wait(t, "IPv6 replica", "ns/epp-1@[fd00::2]:9005")
}

// TestLookupFailures: before the first answer the replica is not ready and says
// why; after it, a failed lookup (a server failure, no answer in time) keeps the
// last good set and makes the view stale, and an answer makes it fresh.
func TestLookupFailures(t *testing.T) {
	r := start(t, self, func(s *dnsserver.Server) {
		endpoints(s, "10.0.0.1", "10.0.0.2")
		s.SetMode(dnsserver.ServFail)
	})
	wait.Until(t, 5*time.Second, "the failure reported", func() bool { return r.pub.LastError() != nil })
	if r.pub.Synced() || !strings.Contains(r.pub.LastError().Error(), name) {
		t.Fatalf("before any answer: synced=%v err=%v (want not synced, naming %s)", r.pub.Synced(), r.pub.LastError(), name)
	}
	r.dns.SetMode(dnsserver.Answer)
	r.wait(t, "answered", "ns/10-0-0-2@10.0.0.2:9005")
	lookups := r.pub.Metrics().Errors(dnssrv.ReasonLookup)
	for _, mode := range []dnsserver.Mode{dnsserver.ServFail, dnsserver.Silent} {
		before := testutil.ToFloat64(lookups)
		r.dns.SetMode(mode)
		wait.Until(t, 5*time.Second, fmt.Sprintf("stale in mode %d", mode), func() bool { stale, _, _, _ := r.pub.Stale(); return stale })
		if _, _, reason, err := r.pub.Stale(); reason != dnssrv.ReasonLookup || err == nil {
			t.Fatalf("stale reason %q error %v", reason, err)
		}
		if testutil.ToFloat64(lookups) <= before {
			t.Fatal("the failed lookup was not counted")
		}
		if got := list(r.store.Peers()); got != "ns/10-0-0-2@10.0.0.2:9005" {
			t.Fatalf("mode %d: the last good set was not kept: %q", mode, got)
		}
		endpoints(r.dns, "10.0.0.1", "10.0.0.2", "10.0.0.3") // changes while DNS fails
		r.dns.SetMode(dnsserver.Answer)
		wait.Until(t, 5*time.Second, "fresh", func() bool { stale, _, _, _ := r.pub.Stale(); return !stale })
		r.wait(t, "after the failure", "ns/10-0-0-2@10.0.0.2:9005,ns/10-0-0-3@10.0.0.3:9005")
		endpoints(r.dns, "10.0.0.1", "10.0.0.2")
		r.wait(t, "reset", "ns/10-0-0-2@10.0.0.2:9005")
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"_peer-sync._tcp.epp.ns.svc", "_peer-sync._tcp.epp.ns.svc.cluster.local", "_p._udp.x.", name} {
		if err := dnssrv.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "epp.ns.svc", "peer-sync._tcp.epp.ns.svc", "_peer-sync.tcp.epp.ns.svc", "_peer-sync._tcp.Epp_1.ns", "_peer-sync._tcp"} {
		// Why, and the form wanted; the caller names the setting (a flag, a parameter).
		err := dnssrv.ValidateName(bad)
		if err == nil || !strings.Contains(err.Error(), "_<port name>._tcp") || strings.Contains(err.Error(), "--epp-peer-dns") {
			t.Errorf("ValidateName(%q) = %v, want the form wanted, naming no flag", bad, err)
		}
	}
	// Named as the user set it: the flag in the binary, the parameter in a plugin.
	params := map[string]json.RawMessage{"name": json.RawMessage(`"epp.ns.svc"`)}
	if _, err := discovery.ConfigureParams(dnssrv.Spec(), params, nil, nil); err == nil || !strings.HasPrefix(err.Error(), `invalid name="epp.ns.svc": `) {
		t.Errorf("a bad name parameter: %v", err)
	}
	params = map[string]json.RawMessage{"service": json.RawMessage(`"Epp_1"`)}
	if _, err := discovery.ConfigureParams(dnssrv.Spec(), params, nil, nil); err == nil || !strings.HasPrefix(err.Error(), `invalid service="Epp_1": `) {
		t.Errorf("a bad service parameter: %v", err)
	}
}
