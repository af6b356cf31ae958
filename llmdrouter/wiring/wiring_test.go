package wiring_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/wiring"
)

func config(plugins, dataLayer string) string {
	return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" + plugins + dataLayer
}

func TestPluginRef(t *testing.T) {
	peerdiscovery.Register()
	registerStatic()
	const peersPlugin = "  - name: peers\n    type: endpointslice-peer-discovery\n    parameters: {service: epp}\n  - type: queue-scorer\n"
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(config(peersPlugin, "dataLayer:\n  peerDiscovery:\n    pluginRef: peers\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string // the ref, or "error: <substring>"
	}{
		{"no configuration", []string{"--grpc-port=9002"}, ""},
		{"no peer discovery", []string{"--config-text=" + config(peersPlugin, "")}, ""},
		{"config text", []string{"--pool-name=x", "--config-text", config(peersPlugin, "dataLayer:\n  peerDiscovery:\n    pluginRef: peers\n"), "--v=2"}, "peers"},
		{"config file", []string{"--config-file=" + file, "--unknown-to-us=1"}, "peers"},
		{"name defaults to the type", []string{"--config-text=" + config("  - type: dns-peer-discovery\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: dns-peer-discovery\n")}, "dns-peer-discovery"},
		{"names no plugin", []string{"--config-text=" + config(peersPlugin, "dataLayer:\n  peerDiscovery:\n    pluginRef: gossip\n")},
			`error: dataLayer.peerDiscovery.pluginRef="gossip" names no plugin`},
		{"names a plugin of upstream's own types", []string{"--config-text=" + config(peersPlugin, "dataLayer:\n  peerDiscovery:\n    pluginRef: queue-scorer\n")},
			`error: dataLayer.peerDiscovery.pluginRef="queue-scorer" names plugin "queue-scorer" of type "queue-scorer", which is not a peer discovery plugin: no such type is registered before the runner starts`},
		{"a third party's type", []string{"--config-text=" + config("  - name: static\n    type: static-peer-discovery\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: static\n")}, "static"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wiring.PluginRef(tc.args)
			if strings.HasPrefix(tc.want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.want, "error: ")) {
					t.Fatalf("PluginRef = %q, %v; want an error with %q", got, err, strings.TrimPrefix(tc.want, "error: "))
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PluginRef = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// loader builds the configuration's plugins through the EPP's registry, as the
// runner's configuration loader does, then runs until ctx ends (or fails at once).
type loader struct {
	plugins map[string]string // name -> type
	params  map[string]string
	ran     chan struct{}
	fail    error
	err     error // what building the plugins returned
}

func (l *loader) Run(ctx context.Context) error {
	close(l.ran)
	if l.fail != nil {
		return l.fail
	}
	for name, typ := range l.plugins {
		if _, err := fwkplugin.Registry[typ](name, json.NewDecoder(strings.NewReader(l.params[name])), nil); err != nil {
			l.err = err
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// TestRunStartsTheConfiguredPlugin: the wiring starts the plugin the loader built
// under the configured name, feeding wiring.PeerStore (upstream's
// MemoryPeerStore), and stops it with the EPP.
func TestRunStartsTheConfiguredPlugin(t *testing.T) {
	peerdiscovery.Register()
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const name = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"
	srv.SetAddrs("epp-a.epp-peers.ns.svc.cluster.local", "10.0.0.1")
	srv.SetAddrs("epp-b.epp-peers.ns.svc.cluster.local", "10.0.0.2")
	srv.SetSRV(name, dnsserver.SRV{Target: "epp-a.epp-peers.ns.svc.cluster.local", Port: 9005}, dnsserver.SRV{Target: "epp-b.epp-peers.ns.svc.cluster.local", Port: 9005})
	t.Setenv("POD_NAME", "epp-a")
	t.Setenv("POD_IP", "10.0.0.1")
	t.Setenv("NAMESPACE", "ns")
	params := `{"name": "` + name + `", "interval": "1s", "server": "` + srv.Addr() + `"}`
	l := &loader{plugins: map[string]string{"dns-peers": peerdiscovery.DNSType}, params: map[string]string{"dns-peers": params}, ran: make(chan struct{})}
	args := []string{"--config-text=" + config("  - name: dns-peers\n    type: dns-peer-discovery\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: dns-peers\n")}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- wiring.Run(ctx, l, args) }()
	wait.For(t, 10*time.Second, func() string {
		if ps := wiring.PeerStore().Peers(); len(ps) != 1 || ps[0].ID.String() != "ns/epp-b" || ps[0].Address != "10.0.0.2" || ps[0].Port != "9005" {
			return fmt.Sprintf("the wiring's peer store holds %+v, want ns/epp-b", ps)
		}
		return ""
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("Run returned %d after a clean stop", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// failingPlugin is a PeerDiscovery that cannot start.
type failingPlugin struct{ name string }

func (p failingPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "failing-peer-discovery", Name: p.name}
}
func (failingPlugin) Start(context.Context, fwkdl.PeerNotifier) error {
	return errors.New("no Kubernetes API: no in-cluster config")
}
func (failingPlugin) Ready() <-chan struct{} { return make(chan struct{}) }

// TestRunStopsTheEPPWhenPeerDiscoveryFails: a plugin that cannot go on stops the
// EPP (exit code 1) instead of leaving it running without peers.
func TestRunStopsTheEPPWhenPeerDiscoveryFails(t *testing.T) {
	fwkplugin.Register("failing-peer-discovery", fwkplugin.StabilityAlpha,
		func(name string, _ *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
			return failingPlugin{name: name}, nil
		})
	l := &loader{plugins: map[string]string{"doomed": "failing-peer-discovery"}, ran: make(chan struct{})}
	args := []string{"--config-text=" + config("  - name: doomed\n    type: failing-peer-discovery\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: doomed\n")}
	code := make(chan int, 1)
	go func() { code <- wiring.Run(context.Background(), l, args) }()
	select {
	case c := <-code:
		if c != 1 {
			t.Fatalf("Run = %d, want 1", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the EPP kept running after its peer discovery failed")
	}
	select {
	case <-l.ran:
	default:
		t.Fatal("the runner never ran: Run refused the plugin instead of starting it")
	}
}

// TestRunRefusesABadPluginRef: the EPP does not start at all.
func TestRunRefusesABadPluginRef(t *testing.T) {
	peerdiscovery.Register()
	l := &loader{ran: make(chan struct{})}
	args := []string{"--config-text=" + config("  - type: queue-scorer\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: queue-scorer\n")}
	if c := wiring.Run(context.Background(), l, args); c != 1 {
		t.Fatalf("Run = %d, want 1", c)
	}
	select {
	case <-l.ran:
		t.Fatal("the runner ran although pluginRef names no peer discovery plugin")
	default:
	}
}

// notDiscovery is a plugin that is not a PeerDiscovery.
type notDiscovery struct{ typedName fwkplugin.TypedName }

func (p notDiscovery) TypedName() fwkplugin.TypedName { return p.typedName }

// staticPlugin is a third party's PeerDiscovery: the peers of its parameters.
type staticPlugin struct {
	name  string
	peers []string // addresses; peer i is ns/peer-<i>
	ready chan struct{}
}

func (p *staticPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "static-peer-discovery", Name: p.name}
}

func (p *staticPlugin) Start(ctx context.Context, n fwkdl.PeerNotifier) error {
	for i, addr := range p.peers {
		n.Upsert(&fwkdl.PeerMetadata{ID: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("peer-%d", i)}, Address: addr, Port: "9005"})
	}
	close(p.ready)
	<-ctx.Done()
	return nil
}

func (p *staticPlugin) Ready() <-chan struct{} { return p.ready }

// registerStatic registers static-peer-discovery the plain upstream way, as a third
// party's EPP main would: no wrapper of this module's.
func registerStatic() {
	fwkplugin.Register("static-peer-discovery", fwkplugin.StabilityAlpha, func(name string, params *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		var p struct {
			Peers []string `json:"peers"`
		}
		if params != nil {
			if err := params.Decode(&p); err != nil {
				return nil, err
			}
		}
		return &staticPlugin{name: name, peers: p.Peers, ready: make(chan struct{})}, nil
	})
}

// TestRunStartsAThirdPartyDiscovery: a PeerDiscovery registered with plain
// fwkplugin.Register is started like this module's, feeding wiring.PeerStore.
func TestRunStartsAThirdPartyDiscovery(t *testing.T) {
	registerStatic()
	l := &loader{plugins: map[string]string{"static": "static-peer-discovery"}, params: map[string]string{"static": `{"peers": ["10.0.0.7", "10.0.0.8"]}`}, ran: make(chan struct{})}
	args := []string{"--config-text=" + config("  - name: static\n    type: static-peer-discovery\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: static\n")}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- wiring.Run(ctx, l, args) }()
	wait.For(t, 10*time.Second, func() string {
		got := map[string]string{}
		for _, p := range wiring.PeerStore().Peers() {
			got[p.ID.String()] = p.Address
		}
		if got["ns/peer-0"] == "10.0.0.7" && got["ns/peer-1"] == "10.0.0.8" {
			return ""
		}
		select {
		case c := <-code:
			t.Fatalf("Run returned %d: the third party's peer discovery was refused", c)
		default:
		}
		return fmt.Sprintf("the wiring's peer store holds %+v, want the static plugin's ns/peer-0 and ns/peer-1", wiring.PeerStore().Peers())
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("Run returned %d after a clean stop", c)
	}
	for _, name := range []string{"peer-0", "peer-1"} {
		wiring.PeerStore().PeerDelete(types.NamespacedName{Namespace: "ns", Name: name}) // the store outlives Run
	}
}

// TestRunRefusesAPluginThatIsNoPeerDiscovery: a registered type whose instance is
// not a PeerDiscovery fails the configuration's loading (the runner then stops),
// with a message that names the plugin and its type.
func TestRunRefusesAPluginThatIsNoPeerDiscovery(t *testing.T) {
	fwkplugin.Register("a-scorer", fwkplugin.StabilityAlpha, func(name string, _ *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		return notDiscovery{fwkplugin.TypedName{Type: "a-scorer", Name: name}}, nil
	})
	l := &loader{plugins: map[string]string{"scores": "a-scorer"}, ran: make(chan struct{})}
	args := []string{"--config-text=" + config("  - name: scores\n    type: a-scorer\n", "dataLayer:\n  peerDiscovery:\n    pluginRef: scores\n")}
	if c := wiring.Run(context.Background(), l, args); c != 1 {
		t.Fatalf("Run = %d, want 1", c)
	}
	const want = `peer discovery: plugin "scores" (type "a-scorer") does not implement datalayer.PeerDiscovery`
	if l.err == nil || !strings.Contains(l.err.Error(), want) {
		t.Fatalf("the runner's configuration loading failed with %v, want %q", l.err, want)
	}
	// The registry is as it was: Run wrapped the factory only while it ran.
	p, err := fwkplugin.Registry["a-scorer"]("scores", nil, nil)
	if err != nil || p.TypedName().Name != "scores" {
		t.Fatalf("a-scorer's registered factory after Run: %v, %v", p, err)
	}
}
