// Package upstream declares, for tests only, the peer-discovery types of
// llm-d-router's EPP with the method sets its interfaces have (llm-d-router cannot
// be fetched as a Go module here). The adapter in the parent package is compiled and
// tested against them, so that it drops into the EPP with an import change.
package upstream

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TypedName is a plugin's type and instance name.
type TypedName struct {
	Type string
	Name string
}

// Plugin is what every EPP plugin is.
type Plugin interface {
	TypedName() TypedName
}

// Handle gives plugins access to the EPP (unused by peer discovery).
type Handle interface {
	Context() context.Context
}

// FactoryFunc builds a plugin from its entry in the EPP config's plugins list.
type FactoryFunc func(name string, params *json.Decoder, handle Handle) (Plugin, error)

// PeerMetadata is one peer replica of the EPP.
type PeerMetadata struct {
	ID      types.NamespacedName
	Address string
	// Port as a string, empty when unknown.
	Port string
}

// PeerNotifier receives peer changes. It is not safe for concurrent use: every call
// comes from one goroutine, in order.
type PeerNotifier interface {
	Upsert(*PeerMetadata)
	Delete(types.NamespacedName)
}

// PeerDiscovery is a plugin that finds the EPP's peers, selected in the EPP config
// with dataLayer.peerDiscovery.pluginRef.
type PeerDiscovery interface {
	Plugin
	// Start delivers peers to the notifier until ctx ends.
	Start(ctx context.Context, notifier PeerNotifier) error
	// Ready is closed once, after the initial reconciliation.
	Ready() <-chan struct{}
}

// ManagerSetup is implemented by plugins that need the EPP's manager; the EPP calls
// it before the manager starts.
type ManagerSetup interface {
	SetupWithManager(mgr ctrl.Manager) error
}
