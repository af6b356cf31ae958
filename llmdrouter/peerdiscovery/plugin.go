package peerdiscovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/dnssrv"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/sources"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
)

// Plugin types of the sources with names of their own in Go; every source of
// sources.All has a type, "<source>-peer-discovery" (discovery.SourceSpec.PluginType).
const (
	EndpointSliceType = "endpointslice-peer-discovery"
	DNSType           = "dns-peer-discovery"
)

var (
	_ fwkdl.PeerDiscovery   = (*Plugin)(nil)
	_ fwkplugin.StateDumper = (*Plugin)(nil)
	_ fwkplugin.FactoryFunc = EndpointSliceFactory
	_ fwkplugin.FactoryFunc = DNSFactory
)

// Factories of the types named above (Factory of their sources).
var (
	EndpointSliceFactory = Factory(endpointslice.Spec())
	DNSFactory           = Factory(dnssrv.Spec())
)

// Register registers a plugin type of every peer source (sources.All), with
// stability Beta, the plain upstream way (package wiring starts the one
// dataLayer.peerDiscovery.pluginRef names, as it would a third party's).
func Register() {
	for _, spec := range sources.All() {
		fwkplugin.Register(spec.PluginType(), fwkplugin.StabilityBeta, Factory(spec))
	}
}

// Types are the plugin types Register registers, in order.
func Types() []string {
	var out []string
	for _, spec := range sources.All() {
		out = append(out, spec.PluginType())
	}
	return out
}

// Factory builds plugins of the source spec from their parameters: the source's
// settings as spec declares them (each falling back to its variables, then its
// default) and the Extras. The replica's identity comes from the downward-API
// environment (POD_NAME, else the host name; POD_IP, POD_IPS). Unknown parameters
// are errors; every error is one line naming the parameter (or the variable it came
// from), worded as the epp binary's flag errors are.
func Factory(spec discovery.SourceSpec) fwkplugin.FactoryFunc {
	typ := spec.PluginType()
	return func(name string, parameters *json.Decoder, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		var raw map[string]json.RawMessage
		if err := params.Decode(typ, parameters, &raw); err != nil {
			return nil, err
		}
		extras, rest, extrasErr := discovery.ConfigureExtras(raw, getenv)
		c, err := discovery.ConfigureParams(spec, rest, getenv, os.Hostname)
		if unknown := (*discovery.UnknownParamError)(nil); errors.As(err, &unknown) {
			unknown.Known = append(unknown.Known, discovery.ExtrasParams()...)
			return nil, fmt.Errorf("%s parameters: %w", typ, unknown)
		}
		if err != nil {
			return nil, err
		}
		if extrasErr != nil {
			return nil, extrasErr
		}
		log := logger(typ, name)
		d, err := c.PeerDiscovery(name, log, nil)
		if err != nil {
			return nil, err
		}
		return newPlugin(typ, name, d, c.Self, c.Self.Namespace, extras, log)
	}
}

// Plugin is peer discovery as an EPP plugin: a discovery.PeerDiscovery (one source
// with its own store), its /debug/peers view, and the optional extras: an address to
// serve the view on, reachability probing, and an answer on the peer-sync port.
type Plugin struct {
	typedName fwkplugin.TypedName
	discovery *discovery.PeerDiscovery
	view      *debugpeers.View
	prober    *reachability.Prober // nil without probeInterval
	extras    Extras
	self      string // namespace/name, in the peer-sync answer
	selfID    peers.Self
	log       logr.Logger
	debugMux  *http.ServeMux // /debug/peers, and what others add (HandleDebug)

	syncMu     sync.Mutex
	syncTaken  bool          // a cross-replica syncer took the peer-sync address
	syncCancel func()        // stops the answer on the peer-sync address, if running
	syncDone   chan struct{} // closed when it stopped
}

// Environment variables the Extras fall back to (their declaration's).
const (
	DebugAddressEnv    = discovery.DebugAddressEnv
	PeerSyncAddressEnv = discovery.PeerSyncAddressEnv
)

// Extras are the parameters every peer-discovery type shares besides its source's
// (discovery.Extras, declared once for the plugins and the epp binary):
// debugAddress, probeInterval and peerSyncAddress. Each falls back to an
// environment variable (what a kustomize component or a Helm post-renderer can set
// without editing the EPP's configuration file).
type Extras = discovery.Extras

// newPlugin assembles a plugin of type typ named name around d.
func newPlugin(typ, name string, d *discovery.PeerDiscovery, self peers.Self, namespace string, extras Extras, log logr.Logger) (*Plugin, error) {
	p := &Plugin{typedName: fwkplugin.TypedName{Type: typ, Name: name}, discovery: d, extras: extras,
		self: namespace + "/" + self.Name, selfID: self, log: log, debugMux: http.NewServeMux()}
	if extras.ProbeInterval > 0 {
		var err error
		if p.prober, err = reachability.New(reachability.Options{Interval: extras.ProbeInterval, Instance: name}, log.WithName("reachability")); err != nil {
			return nil, fmt.Errorf("probeInterval: %w", err)
		}
	}
	p.view = debugpeers.New(debugpeers.Options{Store: d.Peers(), Publisher: d.Publisher(), Prober: p.prober,
		Self: peers.SelfDocument{Name: self.Name, Namespace: namespace, Addresses: self.Strings()}})
	p.debugMux.Handle("/debug/peers", p.view)
	return p, nil
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.typedName }

// Start implements fwkdl.PeerDiscovery: it runs the source and sends n the initial
// peer set, then every change, from the calling goroutine, until ctx ends (nil) or
// the source cannot go on (its error). The extras run meanwhile.
func (p *Plugin) Start(ctx context.Context, n fwkdl.PeerNotifier) error {
	if n == nil {
		return errors.New("peer discovery: Start needs a PeerNotifier")
	}
	var listeners []net.Listener
	listen := func(param, addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, o := range listeners {
				o.Close()
			}
			return nil, fmt.Errorf("%s: %s=%s: %w", p.typedName, param, addr, err)
		}
		listeners = append(listeners, l)
		return l, nil
	}
	g, ctx := errgroup.WithContext(ctx)
	if p.extras.DebugAddress != "" {
		l, err := listen("debugAddress", p.extras.DebugAddress)
		if err != nil {
			return err
		}
		g.Go(func() error { return p.serveDebug(ctx, l) })
	}
	p.syncMu.Lock()
	if p.extras.PeerSyncAddress != "" && !p.syncTaken {
		l, err := listen("peerSyncAddress", p.extras.PeerSyncAddress)
		if err != nil {
			p.syncMu.Unlock()
			return err
		}
		line := reachability.AnswerLine(p.self)
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		p.syncCancel, p.syncDone = cancel, done
		g.Go(func() error {
			defer close(done)
			if err := reachability.Answer(actx, l, line); err != nil {
				return fmt.Errorf("%s: peerSyncAddress: %w", p.typedName, err)
			}
			return nil
		})
	}
	p.syncMu.Unlock()
	if p.prober != nil {
		g.Go(func() error { return p.prober.Run(ctx, p.discovery.Peers()) })
	}
	g.Go(func() error {
		err := p.discovery.Start(ctx, notifier{n})
		if err == nil && ctx.Err() == nil {
			err = errors.New("peer discovery stopped")
		}
		return err
	})
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// serveDebug serves /debug/peers on l until ctx ends.
func (p *Plugin) serveDebug(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: p.debugMux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			_ = srv.Close()
		}
	}()
	p.log.Info("serving /debug/peers", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: serving /debug/peers: %w", p.typedName, err)
	}
	return nil
}

// Ready implements fwkdl.PeerDiscovery: closed once the notifier given to Start
// holds the initial peer set.
func (p *Plugin) Ready() <-chan struct{} { return p.discovery.Ready() }

// DumpState implements fwkplugin.StateDumper: the /debug/peers document, which the
// EPP serves at /debug/plugins/state on its metrics port.
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.RawMessage(p.view.JSON()), nil }

// Peers reads the peer set this plugin delivers (for a consumer in the same EPP,
// such as a cross-replica syncer).
func (p *Plugin) Peers() peers.Reader { return p.discovery.Peers() }

// SelfListed reports whether this discovery lists the replica itself as a member,
// by the rule it applies to its peers (what its peers' discovery decides of it),
// and a channel closed when that may have changed. A cross-replica syncer pushes
// only while it is true.
func (p *Plugin) SelfListed() (bool, <-chan struct{}) { return p.discovery.SelfListed() }

// Self is the replica this discovery leaves out of its peers.
func (p *Plugin) Self() peers.Self { return p.selfID }

// HandleDebug adds a handler to the plugin's debug server (DebugAddress), beside
// /debug/peers.
func (p *Plugin) HandleDebug(path string, h http.Handler) { p.debugMux.Handle(path, h) }

// TakePeerSyncAddress hands the peer-sync address to a cross-replica syncer that
// listens there itself (and answers the peers' probes): the plugin stops answering
// on it, or never starts. It returns the address ("" when the plugin has none).
func (p *Plugin) TakePeerSyncAddress() string {
	p.syncMu.Lock()
	p.syncTaken = true
	cancel, done := p.syncCancel, p.syncDone
	p.syncCancel, p.syncDone = nil, nil
	p.syncMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return p.extras.PeerSyncAddress
}

// Status is the discovery's status: synced, and the last error.
func (p *Plugin) Status() discovery.Status { return p.discovery.Status() }

// notifier turns this project's peer changes into the EPP's.
type notifier struct{ n fwkdl.PeerNotifier }

func (n notifier) UpsertPeer(p peers.PeerMetadata) {
	port := ""
	if p.Port > 0 {
		port = strconv.Itoa(int(p.Port))
	}
	n.n.Upsert(&fwkdl.PeerMetadata{ID: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, Address: p.Address, Port: port})
}

func (n notifier) DeletePeer(id string) {
	namespace, name, _ := strings.Cut(id, "/") // a namespace never holds a "/"
	n.n.Delete(types.NamespacedName{Namespace: namespace, Name: name})
}

// getenv reads the environment (a variable, so tests may replace it).
var getenv = os.Getenv

// logger is the plugin's logger.
func logger(typ, name string) logr.Logger {
	return ctrl.Log.WithName(typ).WithValues("plugin", name)
}
