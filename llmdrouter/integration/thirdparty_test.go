package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/llm-d/llm-d-router/cmd/epp/runner"
	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/wiring"
)

// asThirdPartyEPP, set to 1 in its environment, makes the test binary run as a third
// party's EPP main (thirdPartyEPPMain) instead of running tests.
const asThirdPartyEPP = "EPP_TEST_AS_THIRD_PARTY_EPP"

// thirdPartyEPPMain is the EPP main of a third party with a peer discovery of its
// own: upstream's runner, this module's plugins and wiring, and the type
// static-peer-discovery registered the plain upstream way.
func thirdPartyEPPMain() int {
	fwkplugin.Register(staticPeersType, fwkplugin.StabilityAlpha, staticPeersFactory)
	fwkplugin.Register(notPeersType, fwkplugin.StabilityAlpha, func(name string, _ *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		return notPeers{name}, nil
	})
	llmdrouter.Register()
	return wiring.Run(ctrl.SetupSignalHandler(), runner.NewRunner(), os.Args[1:])
}

const (
	staticPeersType = "static-peer-discovery"
	notPeersType    = "not-a-peer-discovery"
)

// notPeers is a plugin of the third party's that discovers no peers.
type notPeers struct{ name string }

func (p notPeers) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: notPeersType, Name: p.name}
}

// staticPeers is the third party's datalayer.PeerDiscovery: the peers its
// parameters list ({"peers": ["ns/name@address:port", ...]}).
type staticPeers struct {
	name  string
	peers []fwkdl.PeerMetadata
	ready chan struct{}
}

var _ fwkdl.PeerDiscovery = (*staticPeers)(nil)

func staticPeersFactory(name string, params *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p struct {
		Peers []string `json:"peers"`
	}
	if params != nil {
		if err := params.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s: %w", staticPeersType, err)
		}
	}
	s := &staticPeers{name: name, ready: make(chan struct{})}
	for _, peer := range p.Peers {
		var ns, pod, addr, port string
		if _, err := fmt.Sscanf(strings.NewReplacer("/", " ", "@", " ", ":", " ").Replace(peer), "%s %s %s %s", &ns, &pod, &addr, &port); err != nil {
			return nil, fmt.Errorf("%s: peer %q: want ns/name@address:port", staticPeersType, peer)
		}
		s.peers = append(s.peers, fwkdl.PeerMetadata{ID: types.NamespacedName{Namespace: ns, Name: pod}, Address: addr, Port: port})
	}
	return s, nil
}

func (s *staticPeers) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: staticPeersType, Name: s.name}
}

func (s *staticPeers) Start(ctx context.Context, n fwkdl.PeerNotifier) error {
	for i := range s.peers {
		n.Upsert(&s.peers[i])
	}
	close(s.ready)
	<-ctx.Done()
	return nil
}

func (s *staticPeers) Ready() <-chan struct{} { return s.ready }

// TestRealEPPStartsAThirdPartyPeerDiscovery: upstream's runner with the wiring, in a
// third party's EPP main whose peer discovery is registered with plain
// fwkplugin.Register, starts that discovery and fills its peer store from it.
func TestRealEPPStartsAThirdPartyPeerDiscovery(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "third", nil)
	if err != nil {
		t.Fatal(err)
	}
	const config = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - name: static
    type: static-peer-discovery
    parameters:
      peers: ["team-a/epp-1@10.0.0.2:9005", "team-a/epp-2@10.0.0.3:9005"]
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
dataLayer:
  peerDiscovery:
    pluginRef: static
`
	r := startWith(t, thirdPartyLaunch(t), ns, 1, func(*replica) string { return config })[0]
	const ready = "peer discovery ready: the peer store holds the initial set"
	line := ""
	wait.For(t, 30*time.Second, func() string {
		for l := range strings.Lines(r.out.String()) {
			if strings.Contains(l, ready) {
				line = l
			}
		}
		if line == "" {
			return fmt.Sprintf("the EPP did not say %q:\n%s", ready, r.out.String())
		}
		return ""
	})
	if !strings.Contains(line, `"plugin":"static"`) || !strings.Contains(line, `"peers":2`) {
		t.Fatalf("the EPP started the third party's discovery, but logged %s; want plugin static with 2 peers", line)
	}
}

// thirdPartyLaunch starts replicas of thirdPartyEPPMain (the test binary).
func thirdPartyLaunch(t *testing.T) eppreplica.Launch {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := eppLaunch(t, self, "--allow-experimental-plugins")
	l.Env = []string{asThirdPartyEPP + "=1"}
	return l
}

// TestRealEPPRefusesAPluginThatIsNoPeerDiscovery: a pluginRef that names a plugin
// of a registered type that is no datalayer.PeerDiscovery stops the EPP at start-up
// (exit code 1), with a message that names the plugin and its type.
func TestRealEPPRefusesAPluginThatIsNoPeerDiscovery(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "third", nil)
	if err != nil {
		t.Fatal(err)
	}
	const config = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - name: scores
    type: not-a-peer-discovery
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
dataLayer:
  peerDiscovery:
    pluginRef: scores
`
	rs := []*replica{{Replica: eppreplica.New(0)}}
	err = launch(t, thirdPartyLaunch(t), ns, rs, func(*replica) string { return config })
	const want = `peer discovery: plugin \"scores\" (type \"not-a-peer-discovery\") does not implement datalayer.PeerDiscovery`
	if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), want) {
		t.Fatalf("the EPP with pluginRef naming a plugin that is no peer discovery: %v\nwant it to exit with code 1, saying %s", err, want)
	}
}
