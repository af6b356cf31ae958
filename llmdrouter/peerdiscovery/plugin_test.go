package peerdiscovery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/sources"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/settingnames"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
)

// eppDir holds the epp binary that binaryRefusal builds, once per test process.
var eppDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if eppDir != "" {
		os.RemoveAll(eppDir)
	}
	os.Exit(code)
}

var eppBinary = sync.OnceValues(func() (string, error) {
	var err error
	if eppDir, err = os.MkdirTemp("", "epp-binary"); err != nil {
		return "", err
	}
	path := filepath.Join(eppDir, "epp")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/epp-peer-discovery/epp-peer-discovery/controller/cmd/epp").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the epp binary: %w\n%s", err, out)
	}
	return path, nil
})

// binaryRefusal runs the epp binary with args and only the variables of kv (pairs,
// a later one winning; those with empty values left out), and returns the error it printed if it exited
// with code 2 at once, as it does on a bad flag or variable; nil if it did not.
func binaryRefusal(t *testing.T, args []string, kv ...string) error {
	t.Helper()
	epp, err := eppBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, epp, args...)
	env := map[string]string{} // a later pair wins
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	cmd.Env = []string{}
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if failed := (*exec.ExitError)(nil); !errors.As(err, &failed) || failed.ExitCode() != 2 {
		return nil
	}
	line, _, _ := strings.Cut(stderr.String(), "\n")
	return errors.New(strings.TrimPrefix(line, "epp: "))
}

// The plugin is upstream's PeerDiscovery, compiled against upstream's interfaces.
var _ fwkdl.PeerDiscovery = (*peerdiscovery.Plugin)(nil)

func params(s string) *json.Decoder { return json.NewDecoder(strings.NewReader(s)) }

func setEnv(t *testing.T, kv ...string) {
	for _, k := range []string{"POD_NAME", "POD_IP", "POD_IPS", "NAMESPACE", "POD_NAMESPACE", "EPP_PEER_SERVICE", "EPP_PEER_PORT_NAME",
		"EPP_PEER_PORT", "EPP_PEER_MEMBERSHIP", "EPP_PEER_PROBE_INTERVAL", "EPP_PEER_DEBUG_ADDRESS", "EPP_PEER_SYNC_ADDRESS", "EPP_PEER_DNS", "EPP_PEER_DNS_SERVICE", "EPP_PEER_FILE"} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// TestRegisteredInTheEPPRegistry: a type of every peer source is in upstream's
// registry, Beta (no --allow-experimental-plugins needed), and builds through it.
func TestRegisteredInTheEPPRegistry(t *testing.T) {
	peerdiscovery.Register()
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")
	example := map[string]string{
		peerdiscovery.EndpointSliceType: `{"service": "epp"}`,
		peerdiscovery.DNSType:           `{"name": "_peer-sync._tcp.epp.ns.svc.cluster.local"}`,
		"file-peer-discovery":           `{"path": "/etc/epp/peers.yaml"}`,
	}
	for _, spec := range sources.All() {
		typ := spec.PluginType()
		factory, ok := fwkplugin.Registry[typ]
		if !ok {
			t.Fatalf("%s is not registered", typ)
		}
		if s := fwkplugin.GetPluginStability(typ); s != fwkplugin.StabilityBeta {
			t.Errorf("%s has stability %v, want Beta", typ, s)
		}
		p, ok := example[typ]
		if !ok {
			continue // a source added since: its own tests build it
		}
		plugin, err := factory("peers", params(p), nil)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if _, ok := plugin.(fwkdl.PeerDiscovery); !ok || plugin.TypedName() != (fwkplugin.TypedName{Type: typ, Name: "peers"}) {
			t.Fatalf("%s built %T named %v", typ, plugin, plugin.TypedName())
		}
	}
	if got := strings.Join(peerdiscovery.Types(), ","); !strings.HasPrefix(got, "endpointslice-peer-discovery,file-peer-discovery,dns-peer-discovery") {
		t.Errorf("types %s", got)
	}
}

// TestParametersAreValidatedLikeFlags: the plugin refuses what the epp binary's
// flags refuse (the binary built and run), with the same message in the
// parameter's name.
func TestParametersAreValidatedLikeFlags(t *testing.T) {
	dnsName := "_peer-sync._tcp.epp.ns.svc"
	tests := []struct {
		name   string
		typ    string
		flags  []string
		params string
		env    []string
	}{
		{"port out of range", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=epp", "--epp-peer-port=70000"}, `{"service": "epp", "port": 70000}`, nil},
		{"invalid port name", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=epp", "--epp-peer-port-name=Peer_Sync"}, `{"service": "epp", "portName": "Peer_Sync"}`, nil},
		{"invalid service", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=EPP.svc"}, `{"service": "EPP.svc"}`, nil},
		{"invalid membership", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=epp", "--epp-peer-membership=leader"}, `{"service": "epp", "membership": "leader"}`, nil},
		{"invalid namespace", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=epp", "--pool-namespace=Team_A"}, `{"service": "epp", "namespace": "Team_A"}`, nil},
		{"no namespace", peerdiscovery.EndpointSliceType, []string{"--epp-peer-service=epp"}, `{"service": "epp"}`, []string{"NAMESPACE", ""}},
		{"invalid DNS name", peerdiscovery.DNSType, []string{"--epp-peer-dns=epp.ns.svc"}, `{"name": "epp.ns.svc"}`, nil},
		{"invalid DNS server", peerdiscovery.DNSType, []string{"--epp-peer-dns=" + dnsName, "--epp-peer-dns-server=coredns"}, `{"name": "` + dnsName + `", "server": "coredns"}`, nil},
		{"DNS without an address", peerdiscovery.DNSType, []string{"--epp-peer-dns=" + dnsName}, `{"name": "` + dnsName + `"}`, []string{"POD_IP", ""}},
		{"file port", "file-peer-discovery", []string{"--epp-peer-file=/p", "--epp-peer-port=0"}, `{"path": "/p", "port": 0}`, nil},
	}
	rewrite := settingnames.FlagToParam(sources.All())
	peerdiscovery.Register()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv := append([]string{"POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"}, tc.env...)
			setEnv(t, kv...)
			flagErr := binaryRefusal(t, append([]string{"--enable-peer-discovery"}, tc.flags...), kv...)
			_, paramErr := fwkplugin.Registry[tc.typ]("peers", params(tc.params), nil)
			if flagErr == nil || paramErr == nil {
				t.Fatalf("flags: %v; parameters: %v; want both refused", flagErr, paramErr)
			}
			if w := rewrite.Replace(flagErr.Error()); paramErr.Error() != w {
				t.Fatalf("parameters refused with\n  %q\nwant the flags' message in the parameter's name:\n  %q", paramErr, w)
			}
		})
	}
}

// TestProbeIntervalMeansTheSameEverywhere: one probe interval, through the
// plugin's parameter or the variable, is off, on or refused as the table says, and
// the epp binary (built and run), through its flag or the variable, takes or
// refuses it alike, in the same words. (0 used to be off for the binary and an
// error for the plugin. That the binary's accepted values turn probing on or off
// alike is controller/internal/app's TestProbeIntervalFromEnv: both read
// discovery.ProbeIntervalSetting.)
func TestProbeIntervalMeansTheSameEverywhere(t *testing.T) {
	peerdiscovery.Register()
	const off, on, refused = "off", "on", "refused"
	rewrite := strings.NewReplacer("--epp-peer-probe-interval", "probeInterval")
	for _, tc := range []struct{ value, want string }{
		{"0", off}, {"0s", off}, {"100ms", on}, {"2s", on}, {"50ms", refused}, {"-1s", refused}, {"5", refused},
	} {
		base := []string{"POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"}
		// Without a peer source, the binary exits at once: on "needs a peer source"
		// once it took the interval, else on the interval.
		binary := func(args []string, kv ...string) error {
			err := binaryRefusal(t, append([]string{"--enable-peer-discovery"}, args...), kv...)
			if err == nil {
				t.Fatalf("epp %v did not exit with code 2", args)
			}
			if strings.Contains(err.Error(), "needs a peer source") {
				return nil
			}
			return err
		}
		plugin := func(parameters string, kv ...string) (string, error) {
			setEnv(t, kv...)
			p, err := fwkplugin.Registry[peerdiscovery.EndpointSliceType]("peers", params(parameters), nil)
			switch {
			case err != nil:
				return refused, err
			case peerdiscovery.Probing(p):
				return on, nil
			}
			return off, nil
		}
		viaParam, paramErr := plugin(`{"service": "epp", "probeInterval": "`+tc.value+`"}`, base...)
		viaEnv, envErr := plugin(`{"service": "epp"}`, append(base, "EPP_PEER_PROBE_INTERVAL", tc.value)...)
		if viaParam != tc.want || viaEnv != tc.want {
			t.Errorf("probe interval %q: %s as probeInterval, %s as EPP_PEER_PROBE_INTERVAL; want %s", tc.value, viaParam, viaEnv, tc.want)
		}
		flagErr := binary([]string{"--epp-peer-probe-interval=" + tc.value}, base...)
		binaryEnvErr := binary(nil, append(base, "EPP_PEER_PROBE_INTERVAL", tc.value)...)
		if (flagErr != nil) != (paramErr != nil) || (binaryEnvErr != nil) != (envErr != nil) {
			t.Errorf("probe interval %q: the binary refuses it with %v (flag) and %v (variable), the plugin with %v and %v", tc.value, flagErr, binaryEnvErr, paramErr, envErr)
			continue
		}
		if flagErr == nil {
			continue
		}
		if envErr.Error() != binaryEnvErr.Error() {
			t.Errorf("EPP_PEER_PROBE_INTERVAL=%q: the plugin refuses it with %q, the binary with %q", tc.value, envErr, binaryEnvErr)
		}
		// The flag shows a duration as given, the parameter as JSON. (A value that is
		// no duration at all is refused by the flag package first, in its own words.)
		if !strings.HasPrefix(flagErr.Error(), "invalid --") {
			continue
		}
		if want := strings.Replace(rewrite.Replace(flagErr.Error()), "="+tc.value+":", `="`+tc.value+`":`, 1); paramErr.Error() != want {
			t.Errorf("probeInterval %q refused with %q, want the flag's words %q", tc.value, paramErr, want)
		}
	}
}

func TestParametersRejected(t *testing.T) {
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns")
	for _, tc := range []struct {
		typ, params, want string
	}{
		{peerdiscovery.EndpointSliceType, `{"service": "epp", "serivce": "x"}`, `unknown field "serivce"`},
		{peerdiscovery.EndpointSliceType, `{}`, "service is required"},
		{peerdiscovery.EndpointSliceType, `{"service": "epp", "debugAddress": "9091"}`, `invalid debugAddress="9091": want host:port, e.g. ":9091"`},
		// The peer-sync port's example is the peer-sync port, not the debug port.
		{peerdiscovery.EndpointSliceType, `{"service": "epp", "peerSyncAddress": "9005"}`, `invalid peerSyncAddress="9005": want host:port, e.g. ":9005"`},
		{peerdiscovery.DNSType, `{}`, "name or service is required"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "service": "epp-peers"}`, "mutually exclusive"},
		{peerdiscovery.DNSType, `{"name": "epp.ns.svc"}`, "_<port name>._tcp"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "interval": "200ms"}`, `interval="200ms"`},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "interval": 5}`, "duration"},
		{peerdiscovery.DNSType, `{"name": "_p._tcp.epp.ns.svc", "server": "coredns"}`, `server="coredns"`},
		{peerdiscovery.DNSType, `{"service": "Epp_Peers"}`, `invalid service="Epp_Peers"`},
		{"file-peer-discovery", `{}`, "path is required"},
		{"file-peer-discovery", `{"path": "/p", "service": "epp"}`, `unknown field "service": the parameters are namespace, path, port, membership, debugAddress, probeInterval, peerSyncAddress`},
	} {
		peerdiscovery.Register()
		_, err := fwkplugin.Registry[tc.typ]("peers", params(tc.params), nil)
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
	wait.For(t, 10*time.Second, func() string {
		if got := ids(); got != "ns/epp-b@10.0.0.2:9005" {
			return fmt.Sprintf("after a peer left, the store holds %q", got)
		}
		return ""
	})
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
		{"EPP_PEER_PROBE_INTERVAL", "50ms", `invalid EPP_PEER_PROBE_INTERVAL="50ms": want 0 (off) or at least 100ms`},
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
		!strings.Contains(err.Error(), `invalid probeInterval="50ms": want 0 (off) or at least 100ms`) {
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
		wait.For(t, 10*time.Second, func() string {
			if got := reachable(p); got != want {
				state, _ := p.DumpState()
				return fmt.Sprintf("%s: %s, want %s\n%s", what, got, want, state)
			}
			return ""
		})
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

// TestDNSByServiceAndFromTheEnvironment: dns-peer-discovery takes the headless
// Service (service, with portName) instead of the SRV name, and either from the
// environment (EPP_PEER_DNS_SERVICE with EPP_PEER_PORT_NAME, or EPP_PEER_DNS), what
// a kustomize component sets without editing the EPP's configuration.
func TestDNSByServiceAndFromTheEnvironment(t *testing.T) {
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// The name a pod's search path completes _sync._tcp.epp-peers to.
	const name = "_sync._tcp.epp-peers"
	srv.SetAddrs("epp-a.epp-peers.ns.svc.cluster.local", "10.0.0.1")
	srv.SetAddrs("epp-b.epp-peers.ns.svc.cluster.local", "10.0.0.2")
	srv.SetSRV(name, dnsserver.SRV{Target: "epp-a.epp-peers.ns.svc.cluster.local", Port: 7000},
		dnsserver.SRV{Target: "epp-b.epp-peers.ns.svc.cluster.local", Port: 7000})
	for _, tc := range []struct {
		name   string
		env    []string
		params string
	}{
		{"parameters", nil, `{"service": "epp-peers", "portName": "sync", "server": "` + srv.Addr() + `"}`},
		{"EPP_PEER_DNS_SERVICE", []string{"EPP_PEER_DNS_SERVICE", "epp-peers", "EPP_PEER_PORT_NAME", "sync"}, `{"server": "` + srv.Addr() + `"}`},
		{"EPP_PEER_DNS", []string{"EPP_PEER_DNS", name}, `{"server": "` + srv.Addr() + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, append([]string{"POD_NAME", "epp-a", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"}, tc.env...)...)
			plugin, err := peerdiscovery.DNSFactory("peers", params(tc.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			store := startPlugin(t, plugin.(*peerdiscovery.Plugin))
			if got := upstreamPeers(store); got != "ns/epp-b@10.0.0.2:7000" {
				t.Fatalf("peers %q, want ns/epp-b@10.0.0.2:7000", got)
			}
		})
	}
}

// TestFilePeerDiscovery: file-peer-discovery, the peers file source as a plugin
// (parameter path, or env EPP_PEER_FILE), fills upstream's store and follows the
// file; entries without a namespace or port get the namespace and port settings.
func TestFilePeerDiscovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.yaml")
	write := func(body string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("peers:\n  - {name: epp-0, address: 10.0.0.1}\n  - {name: epp-1, address: 10.0.0.2}\n  - {name: epp-2, address: 10.0.0.3, port: 7000}\n")
	setEnv(t, "POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns", "EPP_PEER_FILE", path)
	peerdiscovery.Register()
	plugin, err := fwkplugin.Registry["file-peer-discovery"]("peers", params(`{"port": 9100}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := startPlugin(t, plugin.(*peerdiscovery.Plugin))
	if got := upstreamPeers(store); got != "ns/epp-1@10.0.0.2:9100,ns/epp-2@10.0.0.3:7000" {
		t.Fatalf("peers %q", got)
	}
	write("peers:\n  - {name: epp-0, address: 10.0.0.1}\n  - {name: epp-2, address: 10.0.0.3, port: 7000}\n")
	wait.Until(t, 10*time.Second, "epp-1 to leave with the file", func() bool { return upstreamPeers(store) == "ns/epp-2@10.0.0.3:7000" })
	state, _ := plugin.(fwkplugin.StateDumper).DumpState()
	if !strings.Contains(string(state), `"source": "file"`) {
		t.Fatalf("DumpState: %s", state)
	}
}

// startPlugin starts p with upstream's MemoryPeerStore behind NewPeerNotifier,
// stops it when the test ends, and returns the store once p is ready.
func startPlugin(t *testing.T, p *peerdiscovery.Plugin) *statesync.MemoryPeerStore {
	t.Helper()
	store := statesync.NewMemoryPeerStore()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx, fwkdl.NewPeerNotifier(store)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	select {
	case <-p.Ready():
	case <-time.After(10 * time.Second):
		state, _ := p.DumpState()
		t.Fatalf("not ready within 10 s: %s", state)
	}
	return store
}

// upstreamPeers lists upstream's store as id@address:port, in its order.
func upstreamPeers(store *statesync.MemoryPeerStore) string {
	var out []string
	for _, p := range store.Peers() {
		out = append(out, p.ID.String()+"@"+p.Address+":"+p.Port)
	}
	return strings.Join(out, ",")
}
