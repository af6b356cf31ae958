// Package wiring is what llm-d-router's EPP runner lacks for peer discovery: it
// parses dataLayer.peerDiscovery.pluginRef but never starts that plugin. Run runs
// the runner, unchanged, and starts the PeerDiscovery plugin the configuration
// names, with upstream's statesync.MemoryPeerStore behind datalayer.NewPeerNotifier,
// for as long as the EPP runs.
//
// Any plugin whose instances implement datalayer.PeerDiscovery works, this
// module's and a third party's alike, registered the plain upstream way before Run:
//
//	fwkplugin.Register("my-peer-discovery", fwkplugin.StabilityAlpha, myFactory)
//	llmdrouter.Register()
//	os.Exit(wiring.Run(ctx, runner.NewRunner(), os.Args[1:]))
//
// To find the instance the runner's configuration loader builds, Run wraps the
// registered factory of the named plugin's type (in fwkplugin.Registry) before the
// runner starts, and records what it builds under that name. So a pluginRef that
// names no plugin, or a plugin whose type is not registered before the runner runs
// (upstream's own types, which the runner registers and none of which discovers
// peers), is refused before the EPP starts; a plugin of a registered type that
// turns out not to implement datalayer.PeerDiscovery fails the configuration's
// loading, naming the plugin and its type.
package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	configapi "github.com/llm-d/llm-d-router/apix/config/v1alpha1"
	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"
)

// Runner is what Run needs of the EPP's runner (runner.NewRunner()).
type Runner interface {
	Run(ctx context.Context) error
}

// registryMu serializes Run's changes to fwkplugin.Registry (tests run Run more
// than once in a process).
var registryMu sync.Mutex

var store = statesync.NewMemoryPeerStore()

// built receives the PeerDiscovery instance the runner builds under one name.
type built struct {
	once sync.Once
	ch   chan fwkdl.PeerDiscovery // capacity 1: the first instance built
}

// track replaces the registered factory of typ with one that also hands the
// instance it builds under name to the returned built (and refuses one that is not
// a PeerDiscovery); restore puts the registered factory back.
func track(name, typ string) (b *built, restore func()) {
	registryMu.Lock()
	defer registryMu.Unlock()
	factory := fwkplugin.Registry[typ]
	b = &built{ch: make(chan fwkdl.PeerDiscovery, 1)}
	fwkplugin.Registry[typ] = func(n string, params *json.Decoder, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
		p, err := factory(n, params, h)
		if err != nil || n != name {
			return p, err
		}
		pd, ok := p.(fwkdl.PeerDiscovery)
		if !ok {
			return nil, fmt.Errorf("peer discovery: plugin %q (type %q) does not implement datalayer.PeerDiscovery, and dataLayer.peerDiscovery.pluginRef names it", n, typ)
		}
		b.once.Do(func() { b.ch <- pd })
		return p, nil
	}
	return b, func() {
		registryMu.Lock()
		defer registryMu.Unlock()
		fwkplugin.Registry[typ] = factory
	}
}

// PeerStore is the store Run feeds: upstream's MemoryPeerStore, which a
// cross-replica syncer in the same EPP reads.
func PeerStore() *statesync.MemoryPeerStore { return store }

// Run runs the EPP: r.Run(ctx), plus the PeerDiscovery plugin that
// dataLayer.peerDiscovery.pluginRef names in the configuration given by args
// (--config-file or --config-text, as the runner reads them), started with
// PeerStore behind datalayer.NewPeerNotifier once the runner has built it, and
// stopped with the EPP. Register the plugin's type (fwkplugin.Register) before
// Run. It returns the process's exit code: 1 when the runner fails (also when the
// plugin it builds is no PeerDiscovery), when pluginRef names no plugin or one of a
// type that is not registered (said on stderr before the EPP starts), or when the
// plugin fails (the EPP is stopped then: an EPP must not run on without the peers it
// was configured to know).
func Run(ctx context.Context, r Runner, args []string) int {
	ref, typ, err := pluginRef(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: %v\n", err)
		return 1
	}
	if ref == "" {
		if err := r.Run(ctx); err != nil {
			return 1
		}
		return 0
	}
	b, restore := track(ref, typ)
	defer restore()
	log := ctrl.Log.WithName("peer-discovery")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed = start(ctx, ref, b, log)
		if failed != nil {
			log.Error(failed, "peer discovery failed: stopping the EPP", "plugin", ref)
			cancel()
		}
	}()
	err = r.Run(ctx)
	cancel()
	<-done
	if err != nil || failed != nil {
		return 1
	}
	return 0
}

// start waits for the runner to build the plugin named ref, then runs it until ctx
// ends.
func start(ctx context.Context, ref string, b *built, log logr.Logger) error {
	var pd fwkdl.PeerDiscovery
	select {
	case <-ctx.Done():
		return nil
	case pd = <-b.ch:
	}
	log.Info("starting peer discovery", "plugin", ref, "type", pd.TypedName().Type)
	go func() {
		select {
		case <-pd.Ready():
			log.Info("peer discovery ready: the peer store holds the initial set", "plugin", ref, "peers", len(store.Peers()))
		case <-ctx.Done():
		}
	}()
	if err := pd.Start(ctx, fwkdl.NewPeerNotifier(store)); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// PluginRef reads dataLayer.peerDiscovery.pluginRef from the configuration that
// args give the runner (--config-file or --config-text; other flags are the
// runner's), and checks that it names a plugin of the configuration whose type is
// registered in fwkplugin.Registry (upstream's own types are registered by the
// runner, later, and none is a peer discovery). "" means the configuration turns no
// peer discovery on. A configuration the runner cannot read either is left to the
// runner to report.
func PluginRef(args []string) (string, error) {
	ref, _, err := pluginRef(args)
	return ref, err
}

// pluginRef is PluginRef that also returns the plugin's type.
func pluginRef(args []string) (ref, typ string, err error) {
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	file := fs.String("config-file", "", "")
	text := fs.String("config-text", "", "")
	if err := fs.Parse(args); err != nil {
		return "", "", nil // the runner reports bad flags (and -h)
	}
	data := []byte(*text)
	if len(data) == 0 && *file != "" {
		if data, err = os.ReadFile(*file); err != nil {
			return "", "", nil // the runner reports it
		}
	}
	var cfg configapi.EndpointPickerConfig
	if len(data) == 0 || yaml.Unmarshal(data, &cfg) != nil {
		return "", "", nil
	}
	if cfg.DataLayer == nil || cfg.DataLayer.PeerDiscovery == nil || cfg.DataLayer.PeerDiscovery.PluginRef == "" {
		return "", "", nil
	}
	ref = cfg.DataLayer.PeerDiscovery.PluginRef
	for _, p := range cfg.Plugins {
		name := p.Name
		if name == "" {
			name = p.Type // the runner's default
		}
		if name != ref {
			continue
		}
		registryMu.Lock()
		_, registered := fwkplugin.Registry[p.Type]
		registryMu.Unlock()
		if !registered {
			return "", "", fmt.Errorf("dataLayer.peerDiscovery.pluginRef=%q names plugin %q of type %q, which is not a peer discovery plugin: no such type is registered before the runner starts (register a peer discovery type with fwkplugin.Register before wiring.Run)",
				ref, name, p.Type)
		}
		return ref, p.Type, nil
	}
	return "", "", fmt.Errorf("dataLayer.peerDiscovery.pluginRef=%q names no plugin: add {name: %s, type: <a peer discovery type, such as endpointslice-peer-discovery>} to plugins",
		ref, ref)
}
