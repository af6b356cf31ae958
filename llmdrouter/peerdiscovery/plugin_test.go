package peerdiscovery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
)

// The plugin is upstream's PeerDiscovery, compiled against upstream's interfaces.
var _ fwkdl.PeerDiscovery = (*peerdiscovery.Plugin)(nil)

func params(s string) *json.Decoder { return json.NewDecoder(strings.NewReader(s)) }

func setEnv(t *testing.T, kv ...string) {
	for _, k := range []string{"POD_NAME", "POD_IP", "POD_IPS", "NAMESPACE", "POD_NAMESPACE", "EPP_PEER_SERVICE", "EPP_PEER_PORT_NAME",
		"EPP_PEER_PORT", "EPP_PEER_MEMBERSHIP", "EPP_PEER_PROBE_INTERVAL", "EPP_PEER_DEBUG_ADDRESS", "EPP_PEER_SYNC_ADDRESS", "EPP_PEER_DNS"} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// TestRegisteredInTheEPPRegistry: both types are in upstream's registry, Beta (no
// --allow-experimental-plugins needed), and build through it.
func TestRegisteredInTheEPPRegistry(t *testing.T) {
	peerdiscovery.Register()
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")
	for typ, p := range map[string]string{
		peerdiscovery.EndpointSliceType: `{"service": "epp"}`,
		peerdiscovery.DNSType:           `{"name": "_peer-sync._tcp.epp.ns.svc.cluster.local"}`,
	} {
		factory, ok := fwkplugin.Registry[typ]
		if !ok {
			t.Fatalf("%s is not registered", typ)
		}
		if s := fwkplugin.GetPluginStability(typ); s != fwkplugin.StabilityBeta {
			t.Errorf("%s has stability %v, want Beta", typ, s)
		}
		plugin, err := factory("peers", params(p), nil)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if _, ok := plugin.(fwkdl.PeerDiscovery); !ok || plugin.TypedName() != (fwkplugin.TypedName{Type: typ, Name: "peers"}) {
			t.Fatalf("%s built %T named %v", typ, plugin, plugin.TypedName())
		}
	}
}

// TestParametersAreValidatedLikeFlags: the plugin refuses what the epp binary's
// flags refuse, with the same message in the parameter's name.
func TestParametersAreValidatedLikeFlags(t *testing.T) {
	tests := []struct {
		name   string
		flags  []string
		params string
		env    []string
	}{
		{"port out of range", []string{"--epp-peer-port=70000"}, `{"service": "epp", "port": 70000}`, nil},
		{"invalid port name", []string{"--epp-peer-port-name=Peer_Sync"}, `{"service": "epp", "portName": "Peer_Sync"}`, nil},
		{"invalid service", []string{"--epp-peer-service=EPP.svc"}, `{"service": "EPP.svc"}`, nil},
		{"invalid membership", []string{"--epp-peer-membership=leader"}, `{"service": "epp", "membership": "leader"}`, nil},
		{"invalid namespace", []string{"--pool-namespace=Team_A"}, `{"service": "epp", "namespace": "Team_A"}`, nil},
		{"no namespace", nil, `{"service": "epp"}`, []string{"NAMESPACE", ""}},
	}
	names := endpointslice.FlagNames
	flagToParam := strings.NewReplacer(
		names.PortName, endpointslice.ParamNames.PortName, names.Service, endpointslice.ParamNames.Service,
		names.Namespace, endpointslice.ParamNames.Namespace, names.Port, endpointslice.ParamNames.Port,
		names.Membership, endpointslice.ParamNames.Membership)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv := append([]string{"POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"}, tc.env...)
			setEnv(t, kv...)
			m := map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			args := append([]string{"--enable-peer-discovery", "--epp-peer-service=epp"}, tc.flags...)
			_, flagErr := app.Parse(args, func(k string) string { return m[k] }, &bytes.Buffer{})
			_, paramErr := peerdiscovery.EndpointSliceFactory("peers", params(tc.params), nil)
			if flagErr == nil || paramErr == nil {
				t.Fatalf("flags: %v; parameters: %v; want both refused", flagErr, paramErr)
			}
			if w := flagToParam.Replace(flagErr.Error()); paramErr.Error() != w {
				t.Fatalf("parameters refused with\n  %q\nwant the flags' message in the parameter's name:\n  %q", paramErr, w)
			}
		})
	}
}

func TestParametersRejected(t *testing.T) {
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")
	for _, tc := range []struct {
		typ, params, want string
	}{
		{peerdiscovery.EndpointSliceType, `{"service": "epp", "serivce": "x"}`, `unknown field "serivce"`},
		{peerdiscovery.EndpointSliceType, `{}`, "service is required"},
		{peerdiscovery.EndpointSliceType, `{"service": "epp", "debugAddress": "9091"}`, `invalid debugAddress="9091"`},
		{peerdiscovery.DNSType, `{}`, "name or service is required"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "service": "epp-peers"}`, "mutually exclusive"},
		{peerdiscovery.DNSType, `{"name": "epp.ns.svc"}`, "_<port name>._tcp"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "interval": "200ms"}`, `interval="200ms"`},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "interval": 5}`, "duration"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "server": "coredns"}`, `server="coredns"`},
	} {
		var err error
		if tc.typ == peerdiscovery.EndpointSliceType {
			_, err = peerdiscovery.EndpointSliceFactory("peers", params(tc.params), nil)
		} else {
			_, err = peerdiscovery.DNSFactory("peers", params(tc.params), nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want an error with %q", tc.typ, tc.params, err, tc.want)
		}
	}
	setEnv(t, "POD_NAME", "epp-0", "NAMESPACE", "ns")
	if _, err := peerdiscovery.DNSFactory("peers", params(`{"name": "_p._tcp.epp.ns.svc"}`), nil); err == nil || !strings.Contains(err.Error(), "POD_IP") {
		t.Errorf("DNS discovery without POD_IP: %v", err)
	}
}

// TestStartThroughUpstreamsContractOnly: built by its factory and driven only by
// Start and Ready, with upstream's MemoryPeerStore behind NewPeerNotifier, the
// plugin fills the store and follows changes (the DNS type, against a DNS server of
// the test's own: no Kubernetes needed).
func TestStartThroughUpstreamsContractOnly(t *testing.T) {
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const name = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"
	set := func(addrs ...string) {
		var recs []dnsserver.SRV
		for i, a := range addrs {
			host := "epp-" + string(rune('a'+i)) + ".epp-peers.ns.svc.cluster.local"
			srv.SetAddrs(host, a)
			recs = append(recs, dnsserver.SRV{Target: host, Port: 9005})
		}
		srv.SetSRV(name, recs...)
	}
	set("10.0.0.1", "10.0.0.2", "10.0.0.3")
	setEnv(t, "POD_NAME", "epp-a", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")
	plugin, err := peerdiscovery.DNSFactory("peers", params(`{"name": "`+name+`", "interval": "1s", "server": "`+srv.Addr()+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	pd := plugin.(fwkdl.PeerDiscovery)
	store := statesync.NewMemoryPeerStore()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pd.Start(ctx, fwkdl.NewPeerNotifier(store)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	select {
	case <-pd.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready not closed")
	}
	ids := func() string {
		var out []string
		for _, p := range store.Peers() {
			out = append(out, p.ID.String()+"@"+p.Address+":"+p.Port)
		}
		return strings.Join(out, ",")
	}
	if got := ids(); got != "ns/epp-b@10.0.0.2:9005,ns/epp-c@10.0.0.3:9005" {
		t.Fatalf("upstream's store holds %q once Ready is closed", got)
	}
	set("10.0.0.1", "10.0.0.2")
	for deadline := time.Now().Add(10 * time.Second); ids() != "ns/epp-b@10.0.0.2:9005"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a peer left, the store holds %q", ids())
		}
	}
	// Its view, as the EPP's /debug/plugins/state shows it.
	state, err := plugin.(fwkplugin.StateDumper).DumpState()
	if err != nil {
		t.Fatal(err)
	}
	var doc peers.Document
	if err := json.Unmarshal(state, &doc); err != nil || doc.Source != "dns" || len(doc.Peers) != 1 {
		t.Fatalf("DumpState: %v\n%s", err, state)
	}
}

// TestParametersFromTheEnvironment: what the configuration leaves out comes from
// the environment (what a kustomize component or a post-renderer sets), and a bad
// value is named by its variable.
func TestParametersFromTheEnvironment(t *testing.T) {
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns", "EPP_PEER_SERVICE", "router-epp", "EPP_PEER_MEMBERSHIP", "alive",
		"EPP_PEER_PORT", "7000", "EPP_PEER_DEBUG_ADDRESS", "127.0.0.1:0")
	p, err := peerdiscovery.EndpointSliceFactory("peers", params(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := p.(fwkplugin.StateDumper).DumpState()
	if !strings.Contains(string(state), `"source": "endpointslice"`) {
		t.Fatalf("state: %s", state)
	}
	for _, tc := range []struct{ env, value, want string }{
		{"EPP_PEER_MEMBERSHIP", "leader", `invalid EPP_PEER_MEMBERSHIP="leader"`},
		{"EPP_PEER_PORT", "http", `invalid EPP_PEER_PORT="http"`},
		{"EPP_PEER_PORT", "70000", "invalid EPP_PEER_PORT=70000"},
		{"EPP_PEER_SERVICE", "EPP.svc", `invalid EPP_PEER_SERVICE="EPP.svc"`},
		{"EPP_PEER_PROBE_INTERVAL", "50ms", `invalid EPP_PEER_PROBE_INTERVAL="50ms": want at least 100ms`},
		{"EPP_PEER_DEBUG_ADDRESS", "9091", `invalid EPP_PEER_DEBUG_ADDRESS="9091"`},
	} {
		setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns", "EPP_PEER_SERVICE", "epp", tc.env, tc.value)
		if _, err := peerdiscovery.EndpointSliceFactory("peers", params(`{}`), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v, want %q", tc.env, tc.value, err, tc.want)
		}
	}
	// A parameter wins over the variable.
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns", "EPP_PEER_MEMBERSHIP", "leader")
	if _, err := peerdiscovery.EndpointSliceFactory("peers", params(`{"service": "epp", "membership": "ready"}`), nil); err != nil {
		t.Fatalf("a parameter must win over its variable: %v", err)
	}
	if _, err := peerdiscovery.EndpointSliceFactory("peers", params(`{"service": "epp", "membership": "ready", "probeInterval": "50ms"}`), nil); err == nil ||
		!strings.Contains(err.Error(), `invalid probeInterval="50ms": want at least 100ms`) {
		t.Fatalf("probeInterval 50ms: %v", err)
	}
}

// TestProbesAndAnswers: two replicas (DNS type, on 127.0.0.1 and 127.0.0.2) answer
// on their peer-sync addresses and probe each other: reachable while the other runs,
// unreachable once it stopped, still a peer.
func TestProbesAndAnswers(t *testing.T) {
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const name = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"
	addrA, addrB := freeAddrOn(t, "127.0.0.1"), freeAddrOn(t, "127.0.0.2")
	srv.SetAddrs("epp-a.epp-peers.ns.svc.cluster.local", "127.0.0.1")
	srv.SetAddrs("epp-b.epp-peers.ns.svc.cluster.local", "127.0.0.2")
	srv.SetSRV(name, dnsserver.SRV{Target: "epp-a.epp-peers.ns.svc.cluster.local", Port: portOf(addrA)},
		dnsserver.SRV{Target: "epp-b.epp-peers.ns.svc.cluster.local", Port: portOf(addrB)})
	build := func(pod, ip, sync string) *peerdiscovery.Plugin {
		setEnv(t, "POD_NAME", pod, "POD_IP", ip, "NAMESPACE", "ns")
		p, err := peerdiscovery.DNSFactory(pod, params(`{"name": "`+name+`", "interval": "1s", "server": "`+srv.Addr()+
			`", "probeInterval": "200ms", "peerSyncAddress": "`+sync+`"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p.(*peerdiscovery.Plugin)
	}
	a, b := build("epp-a", "127.0.0.1", addrA), build("epp-b", "127.0.0.2", addrB)
	run := func(p *peerdiscovery.Plugin) func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Start(ctx, fwkdl.NewPeerNotifier(statesync.NewMemoryPeerStore())) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		}
	}
	defer run(a)()
	stopB := run(b)
	reachable := func(p *peerdiscovery.Plugin) string {
		state, _ := p.DumpState()
		var doc peers.Document
		_ = json.Unmarshal(state, &doc)
		if len(doc.Peers) != 1 || doc.Peers[0].Reachable == nil {
			return "unknown"
		}
		return map[bool]string{true: "reachable", false: "unreachable"}[*doc.Peers[0].Reachable]
	}
	waitFor := func(what string, p *peerdiscovery.Plugin, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); reachable(p) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				state, _ := p.DumpState()
				t.Fatalf("%s: %s, want %s\n%s", what, reachable(p), want, state)
			}
		}
	}
	waitFor("a probes b", a, "reachable")
	waitFor("b probes a", b, "reachable")
	stopB()
	waitFor("a probes a stopped b", a, "unreachable")
}

func freeAddrOn(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	defer l.Close()
	return l.Addr().String()
}

func portOf(addr string) uint16 {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return uint16(n)
}
