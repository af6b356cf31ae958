// Package wiring is what llm-d-router's EPP runner lacks for peer discovery: it
// parses dataLayer.peerDiscovery.pluginRef but never starts that plugin. Run runs
// the runner, unchanged, and starts the PeerDiscovery plugin the configuration
// names, with upstream's statesync.MemoryPeerStore behind datalayer.NewPeerNotifier,
// for as long as the EPP runs.
//
// Run finds the plugin instance the runner's configuration loader creates by
// recording the instances of the peer-discovery plugin types (their factories are
// registered wrapped by Tracked); so a pluginRef that names a plugin of another
// type, or no plugin at all, is refused before the EPP starts, with the reason.
package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
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

var (
	mu        sync.Mutex
	tracked   = map[string]bool{}  // plugin types that are peer discovery
	instances = map[string]*slot{} // by plugin name
	store     = statesync.NewMemoryPeerStore()
)

// slot holds the instance of one plugin name, once its factory built it.
type slot struct {
	built chan struct{}
	pd    fwkdl.PeerDiscovery
}

func slotOf(name string) *slot {
	s, ok := instances[name]
	if !ok {
		s = &slot{built: make(chan struct{})}
		instances[name] = s
	}
	return s
}

// Tracked returns factory wrapped so that Run can find the instance the
// configuration names: register that (fwkplugin.Register(typ, stability,
// wiring.Tracked(typ, factory))) for every peer-discovery plugin type.
// peerdiscovery.Register does it for this module's types.
func Tracked(typ string, factory fwkplugin.FactoryFunc) fwkplugin.FactoryFunc {
	mu.Lock()
	tracked[typ] = true
	mu.Unlock()
	return func(name string, params *json.Decoder, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
		p, err := factory(name, params, h)
		if err != nil {
			return nil, err
		}
		pd, ok := p.(fwkdl.PeerDiscovery)
		if !ok {
			return nil, fmt.Errorf("plugin %s of type %s is not a datalayer.PeerDiscovery", name, typ)
		}
		mu.Lock()
		defer mu.Unlock()
		sl := slotOf(name)
		sl.pd = pd // a configuration loaded again (tests) builds it again: the newest counts
		select {
		case <-sl.built:
		default:
			close(sl.built)
		}
		return p, nil
	}
}

// PeerStore is the store Run feeds: upstream's MemoryPeerStore, which a
// cross-replica syncer in the same EPP reads.
func PeerStore() *statesync.MemoryPeerStore { return store }

// Run runs the EPP: r.Run(ctx), plus the PeerDiscovery plugin that
// dataLayer.peerDiscovery.pluginRef names in the configuration given by args
// (--config-file or --config-text, as the runner reads them), started with
// PeerStore behind datalayer.NewPeerNotifier once the runner has built it, and
// stopped with the EPP. It returns the process's exit code: 1 when the runner
// fails, when pluginRef names no peer-discovery plugin (said on stderr before the
// EPP starts), or when the plugin fails (the EPP is stopped then: an EPP must not
// run on without the peers it was configured to know).
func Run(ctx context.Context, r Runner, args []string) int {
	ref, err := PluginRef(args)
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
	log := ctrl.Log.WithName("peer-discovery")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed = start(ctx, ref, log)
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
func start(ctx context.Context, ref string, log logr.Logger) error {
	mu.Lock()
	sl := slotOf(ref)
	mu.Unlock()
	select {
	case <-ctx.Done():
		return nil
	case <-sl.built:
	}
	mu.Lock()
	pd := sl.pd
	mu.Unlock()
	log.Info("starting peer discovery", "plugin", ref)
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
// runner's), and checks that it names a plugin of a tracked peer-discovery type.
// "" means the configuration turns no peer discovery on. A configuration the runner
// cannot read either is left to the runner to report.
func PluginRef(args []string) (string, error) {
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	file := fs.String("config-file", "", "")
	text := fs.String("config-text", "", "")
	if err := fs.Parse(args); err != nil {
		return "", nil // the runner reports bad flags (and -h)
	}
	data := []byte(*text)
	if len(data) == 0 && *file != "" {
		var err error
		if data, err = os.ReadFile(*file); err != nil {
			return "", nil // the runner reports it
		}
	}
	var cfg configapi.EndpointPickerConfig
	if len(data) == 0 || yaml.Unmarshal(data, &cfg) != nil {
		return "", nil
	}
	if cfg.DataLayer == nil || cfg.DataLayer.PeerDiscovery == nil || cfg.DataLayer.PeerDiscovery.PluginRef == "" {
		return "", nil
	}
	ref := cfg.DataLayer.PeerDiscovery.PluginRef
	mu.Lock()
	defer mu.Unlock()
	var known []string
	for typ := range tracked {
		known = append(known, typ)
	}
	sort.Strings(known)
	for _, p := range cfg.Plugins {
		name := p.Name
		if name == "" {
			name = p.Type // the runner's default
		}
		if name != ref {
			continue
		}
		if !tracked[p.Type] {
			return "", fmt.Errorf("dataLayer.peerDiscovery.pluginRef=%q names plugin %q of type %q, which is not a peer discovery plugin (this EPP's: %s)",
				ref, name, p.Type, strings.Join(known, ", "))
		}
		return ref, nil
	}
	return "", fmt.Errorf("dataLayer.peerDiscovery.pluginRef=%q names no plugin: add {name: %s, type: <one of %s>} to plugins",
		ref, ref, strings.Join(known, ", "))
}
