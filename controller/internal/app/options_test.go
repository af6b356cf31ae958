package app_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

var podEnv = env("POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  func(string) string
		// every substring must be in the one-line error
		want []string
	}{
		{"enabled without a source", []string{"--enable-peer-discovery"}, podEnv,
			[]string{"--epp-peer-service", "--epp-peer-file"}},
		{"both sources", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-file=/p.yaml"}, podEnv,
			[]string{"--epp-peer-service", "--epp-peer-file", "mutually exclusive"}},
		{"port 0", []string{"--epp-peer-port=0"}, podEnv, []string{"--epp-peer-port=0", "1 and 65535"}},
		{"port 70000", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-port=70000"}, podEnv,
			[]string{"--epp-peer-port=70000", "1 and 65535"}},
		{"negative port", []string{"--epp-peer-port", "-1"}, podEnv, []string{"--epp-peer-port=-1"}},
		{"port not a number", []string{"--epp-peer-port=abc"}, podEnv, []string{"epp-peer-port"}},
		{"empty port name", []string{"--epp-peer-port-name="}, podEnv, []string{"--epp-peer-port-name", "empty"}},
		{"invalid port name", []string{"--epp-peer-port-name=Peer_Sync"}, podEnv, []string{"--epp-peer-port-name=\"Peer_Sync\""}},
		{"invalid service name", []string{"--enable-peer-discovery", "--epp-peer-service=EPP.svc"}, podEnv, []string{"--epp-peer-service=\"EPP.svc\""}},
		{"no namespace", []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, env("POD_NAME", "epp-0"),
			[]string{"--pool-namespace", "NAMESPACE"}},
		{"service source without self", []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, env("NAMESPACE", "ns"),
			[]string{"POD_IP", "POD_IPS", "POD_NAME", "downward API"}},
		{"bad POD_IP", []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, env("NAMESPACE", "ns", "POD_IP", "10.0.0"),
			[]string{"POD_IP=\"10.0.0\""}},
		{"bad POD_IPS entry", []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, env("NAMESPACE", "ns", "POD_IPS", "10.0.0.1,[fd00::1]"),
			[]string{"POD_IPS=\"[fd00::1]\""}},
		{"unknown flag", []string{"--epp-peer-servce=epp"}, podEnv, []string{"epp-peer-servce"}},
		{"invalid membership", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-membership=leader"}, podEnv,
			[]string{"--epp-peer-membership=\"leader\"", "ready", "alive"}},
		{"positional argument", []string{"serve"}, podEnv, []string{"\"serve\""}},
		{"DNS name that is not an SRV name", []string{"--enable-peer-discovery", "--epp-peer-dns=epp.ns.svc"}, podEnv,
			[]string{"--epp-peer-dns=\"epp.ns.svc\"", "_<port name>._tcp"}},
		{"DNS and service sources", []string{"--enable-peer-discovery", "--epp-peer-dns=_peer-sync._tcp.epp.ns.svc", "--epp-peer-service=epp"}, podEnv,
			[]string{"--epp-peer-service and --epp-peer-dns are mutually exclusive"}},
		{"DNS interval too short", []string{"--enable-peer-discovery", "--epp-peer-dns=_peer-sync._tcp.epp.ns.svc", "--epp-peer-dns-interval=100ms"}, podEnv,
			[]string{"--epp-peer-dns-interval=100ms", "at least 1s"}},
		{"DNS server not an address", []string{"--enable-peer-discovery", "--epp-peer-dns=_peer-sync._tcp.epp.ns.svc", "--epp-peer-dns-server=coredns"}, podEnv,
			[]string{"--epp-peer-dns-server=\"coredns\""}},
		{"DNS source without an address", []string{"--enable-peer-discovery", "--epp-peer-dns=_peer-sync._tcp.epp.ns.svc"}, env("POD_NAME", "epp-0", "NAMESPACE", "ns"),
			[]string{"--epp-peer-dns", "POD_IP"}},
		{"negative probe interval", []string{"--epp-peer-probe-interval=-1s"}, podEnv, []string{"--epp-peer-probe-interval=-1s", "100ms"}},
		{"probe interval too short", []string{"--epp-peer-probe-interval=10ms"}, podEnv, []string{"--epp-peer-probe-interval=10ms", "at least 100ms"}},
		{"probe interval env not a duration", nil, env("POD_NAME", "epp-0", "NAMESPACE", "ns", "EPP_PEER_PROBE_INTERVAL", "5"),
			[]string{"EPP_PEER_PROBE_INTERVAL=\"5\"", "duration"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := app.Parse(tc.args, tc.env, &stderr)
			var usage *app.UsageError
			if !errors.As(err, &usage) {
				t.Fatalf("Parse(%v) = %v, want a UsageError", tc.args, err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans several lines: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

// TestProbeIntervalFromEnv: EPP_PEER_PROBE_INTERVAL is the flag's default (what a
// kustomize component can set), the flag wins, and 0 is off.
func TestProbeIntervalFromEnv(t *testing.T) {
	base := []string{"--enable-peer-discovery", "--epp-peer-service=epp"}
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "", "0s"},
		{nil, "5s", "5s"},
		{[]string{"--epp-peer-probe-interval=2s"}, "5s", "2s"},
		{[]string{"--epp-peer-probe-interval=0"}, "5s", "0s"},
		{[]string{"--epp-peer-probe-interval=2s"}, "not-a-duration", "2s"},
	} {
		o, err := app.Parse(append(base, tc.args...), env("POD_NAME", "epp-0", "NAMESPACE", "ns", "EPP_PEER_PROBE_INTERVAL", tc.env), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v with EPP_PEER_PROBE_INTERVAL=%q: %v", tc.args, tc.env, err)
		}
		if got := o.ProbeInterval.String(); got != tc.want {
			t.Errorf("%v with EPP_PEER_PROBE_INTERVAL=%q: interval %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
	var stderr bytes.Buffer
	if _, err := app.Parse([]string{"--epp-peer-probe-interval=5s"}, podEnv, &stderr); err != nil || !strings.Contains(stderr.String(), "--epp-peer-probe-interval=5s has no effect without --enable-peer-discovery") {
		t.Errorf("probing without discovery: err %v, warning %q", err, stderr.String())
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		env         func(string) string
		wantSource  string
		wantNS      string
		wantSelf    peers.Self
		wantMember  peers.Membership
		wantWarning string
	}{
		{name: "defaults: off", env: env(), wantSource: ""},
		{name: "off, source flags only warn", args: []string{"--epp-peer-service=epp"}, env: env(),
			wantWarning: "--epp-peer-service=epp has no effect without --enable-peer-discovery"},
		{name: "endpointslice source, namespace from NAMESPACE",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service=epp"},
			env:        env("NAMESPACE", "ns", "POD_NAMESPACE", "other", "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "POD_IPS", "10.0.0.1, fd00::1"),
			wantSource: "endpointslice", wantNS: "ns",
			wantSelf: peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}}},
		{name: "namespace from POD_NAMESPACE, self from POD_IPS only, IPv6 first",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service", "epp"},
			env:        env("POD_NAMESPACE", "team", "POD_IPS", "fd00::1,10.0.0.1"),
			wantSource: "endpointslice", wantNS: "team",
			wantSelf: peers.Self{Namespace: "team", Addresses: []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.1")}}},
		{name: "--pool-namespace wins over env",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--pool-namespace=flagged"},
			env:        env("NAMESPACE", "ns", "POD_NAME", "epp-0"),
			wantSource: "endpointslice", wantNS: "flagged", wantSelf: peers.Self{Namespace: "flagged", Name: "epp-0"}},
		{name: "file source needs no Kubernetes env",
			args: []string{"--enable-peer-discovery", "--epp-peer-file=/etc/epp/peers.yaml"}, env: env(),
			wantSource: "file", wantSelf: peers.Self{Namespace: "default"}},
		{name: "without POD_NAME the host name is the replica's name",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service=epp"},
			env:        env("NAMESPACE", "ns", "HOSTNAME", "epp-7d9f-x2k4"),
			wantSource: "endpointslice", wantNS: "ns", wantSelf: peers.Self{Namespace: "ns", Name: "epp-7d9f-x2k4"}},
		{name: "POD_NAME wins over the host name",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service=epp"},
			env:        env("NAMESPACE", "ns", "HOSTNAME", "node-1", "POD_NAME", "epp-0"),
			wantSource: "endpointslice", wantNS: "ns", wantSelf: peers.Self{Namespace: "ns", Name: "epp-0"}},
		{name: "membership alive",
			args:       []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-membership=alive"},
			env:        podEnv,
			wantSource: "endpointslice", wantNS: "ns", wantMember: peers.MembershipAlive,
			wantSelf: peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := app.Parse(tc.args, tc.env, &stderr)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if o.PeerSource != tc.wantSource || o.PoolNamespace != tc.wantNS {
				t.Errorf("source %q namespace %q, want %q %q", o.PeerSource, o.PoolNamespace, tc.wantSource, tc.wantNS)
			}
			if diff := cmp.Diff(tc.wantSelf, o.Self, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("self (-want +got):\n%s", diff)
			}
			if tc.wantWarning == "" && stderr.Len() > 0 {
				t.Errorf("unexpected output: %q", stderr.String())
			}
			if tc.wantWarning != "" && !strings.Contains(stderr.String(), tc.wantWarning) {
				t.Errorf("stderr %q lacks warning %q", stderr.String(), tc.wantWarning)
			}
			wantMember := tc.wantMember
			if wantMember == "" {
				wantMember = peers.MembershipReady
			}
			if o.MetricsAddr != ":9090" || o.ProbeAddr != ":8081" {
				t.Errorf("defaults changed: %+v", o)
			}
			if tc.wantSource == "" {
				if o.Source != nil {
					t.Errorf("a source is configured with peer discovery off: %v", o.Source.Summary())
				}
				return
			}
			if o.Source == nil || o.Source.Spec.Name != tc.wantSource || o.Source.Self.Name != tc.wantSelf.Name || o.Source.Namespace != tc.wantNS {
				t.Fatalf("the configured source does not follow the options: %+v", o.Source)
			}
			if got := o.Source.Value("membership"); got != string(wantMember) {
				t.Errorf("membership %q, want %q", got, wantMember)
			}
			if got := o.Source.Value("port"); got != "9005" {
				t.Errorf("port %q, want the default 9005", got)
			}
		})
	}
}
