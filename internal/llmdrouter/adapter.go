// Package llmdrouter adapts EndpointSlice peer discovery to the peer-discovery
// plugin interface of llm-d-router's EPP. The README's "Inside llm-d-router's EPP"
// shows how to use it: copy this file into the EPP, replace the import of the
// upstream package with the EPP's own plugin packages, and register Factory under
// PluginType.
package llmdrouter

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/llmdrouter/upstream"
)

// PluginType is the type name to use in the EPP config's plugins list.
const PluginType = "endpointslice-peer-discovery"

var (
	_ upstream.PeerDiscovery = (*PeerDiscovery)(nil)
	_ upstream.ManagerSetup  = (*PeerDiscovery)(nil)
	_ upstream.FactoryFunc   = Factory
)

// PeerDiscovery is EndpointSlice peer discovery as an EPP plugin.
type PeerDiscovery struct {
	name      string
	discovery *endpointslice.Discovery
}

// Factory builds the plugin from its parameters: service (required), namespace,
// portName, port, membership; see endpointslice.Settings.
func Factory(name string, params *json.Decoder, _ upstream.Handle) (upstream.Plugin, error) {
	d, err := endpointslice.NewFromJSON(params, ctrl.Log.WithName(PluginType).WithValues("plugin", name))
	if err != nil {
		return nil, err
	}
	return &PeerDiscovery{name: name, discovery: d}, nil
}

// TypedName implements upstream.Plugin.
func (p *PeerDiscovery) TypedName() upstream.TypedName {
	return upstream.TypedName{Type: PluginType, Name: p.name}
}

// SetupWithManager joins the EPP's manager; the EPP calls it before the manager starts.
func (p *PeerDiscovery) SetupWithManager(mgr ctrl.Manager) error {
	return p.discovery.SetupWithManager(mgr)
}

// Start delivers the peers to n, from the calling goroutine, until ctx ends.
func (p *PeerDiscovery) Start(ctx context.Context, n upstream.PeerNotifier) error {
	return p.discovery.Start(ctx, notifier{n})
}

// Ready is closed after the initial reconciliation.
func (p *PeerDiscovery) Ready() <-chan struct{} { return p.discovery.Ready() }

// notifier turns our peer changes into upstream ones.
type notifier struct{ upstream.PeerNotifier }

func (n notifier) UpsertPeer(p peers.PeerMetadata) {
	port := ""
	if p.Port > 0 {
		port = strconv.Itoa(int(p.Port))
	}
	n.Upsert(&upstream.PeerMetadata{ID: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, Address: p.Address, Port: port})
}

func (n notifier) DeletePeer(id string) {
	namespace, name, _ := strings.Cut(id, "/") // a namespace never holds a "/"
	n.Delete(types.NamespacedName{Namespace: namespace, Name: name})
}
