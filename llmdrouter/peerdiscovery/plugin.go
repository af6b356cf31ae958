package peerdiscovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
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
		extras, rest, err := splitExtras(raw)
		if err != nil {
			return nil, fmt.Errorf("%s parameters: %w", typ, err)
		}
		c, err := discovery.ConfigureParams(spec, rest, getenv, os.Hostname)
		if unknown := (*discovery.UnknownParamError)(nil); errors.As(err, &unknown) {
			unknown.Known = append(unknown.Known, extraParams...)
			return nil, fmt.Errorf("%s parameters: %w", typ, unknown)
		}
		if err != nil {
			return nil, err
		}
		if err := extras.resolve(); err != nil {
			return nil, err
		}
		log := logger(typ, name)
		d, err := c.PeerDiscovery(name, log, nil)
		if err != nil {
			return nil, err
		}
		return newPlugin(typ, name, d, c.Self, c.Self.Namespace, extras, log)
	}
}

// splitExtras takes the Extras' parameters out of raw.
func splitExtras(raw map[string]json.RawMessage) (Extras, map[string]json.RawMessage, error) {
	mine, rest := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range raw {
		if slices.Contains(extraParams, k) {
			mine[k] = v
		} else {
			rest[k] = v
		}
	}
	var e Extras
	b, err := json.Marshal(mine)
	if err != nil {
		return e, nil, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, nil, err
	}
	return e, rest, nil
}

// extraParams are the JSON names of the Extras.
var extraParams = func() []string {
	var out []string
	t := reflect.TypeFor[Extras]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}()

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

// Environment variables the Extras fall back to.
const (
	DebugAddressEnv    = "EPP_PEER_DEBUG_ADDRESS"
	PeerSyncAddressEnv = "EPP_PEER_SYNC_ADDRESS"
)

// Extras are the parameters every peer-discovery type shares besides its source's.
// Each falls back to an environment variable (what a kustomize component or a Helm
// post-renderer can set without editing the EPP's configuration file).
type Extras struct {
	// DebugAddress, if set, serves /debug/peers there (e.g. ":9091"). Env
	// EPP_PEER_DEBUG_ADDRESS.
	DebugAddress string `json:"debugAddress,omitempty"`
	// ProbeInterval, if set, probes every peer's peer-sync port (a TCP connect)
	// about this often, jittered, and shows reachability in /debug/peers; 0 is off,
	// anything else at least 100ms (reachability.CheckInterval, as the binary's
	// --epp-peer-probe-interval). Env EPP_PEER_PROBE_INTERVAL.
	ProbeInterval *params.Duration `json:"probeInterval,omitempty"`
	// PeerSyncAddress, if set, is listened on (":9005") and each connection answered
	// with one line naming the replica, so that its peers' probes find it reachable
	// where nothing else listens on the peer-sync port. Env EPP_PEER_SYNC_ADDRESS.
	PeerSyncAddress string `json:"peerSyncAddress,omitempty"`
}

// resolve fills the extras from the environment where the parameters leave them
// out, and validates them; errors name the parameter, or the variable it came from.
func (e *Extras) resolve() error {
	name := func(param, env string, fromEnv bool) string {
		if fromEnv {
			return env
		}
		return param
	}
	debugEnv := e.DebugAddress == ""
	if debugEnv {
		e.DebugAddress = getenv(DebugAddressEnv)
	}
	if err := params.CheckAddress(name("debugAddress", DebugAddressEnv, debugEnv), e.DebugAddress, ":9091"); err != nil {
		return err
	}
	syncEnv := e.PeerSyncAddress == ""
	if syncEnv {
		e.PeerSyncAddress = getenv(PeerSyncAddressEnv)
	}
	if err := params.CheckAddress(name("peerSyncAddress", PeerSyncAddressEnv, syncEnv), e.PeerSyncAddress, ":9005"); err != nil {
		return err
	}
	if e.ProbeInterval == nil {
		d, set, err := reachability.IntervalFromEnv(getenv)
		if err != nil {
			return fmt.Errorf("invalid %w", err)
		}
		if set {
			e.ProbeInterval = &params.Duration{Duration: d}
			if err := reachability.CheckInterval(d); err != nil {
				return fmt.Errorf("invalid %s=%q: %w", reachability.IntervalEnv, getenv(reachability.IntervalEnv), err)
			}
		}
	} else if err := reachability.CheckInterval(e.ProbeInterval.Duration); err != nil {
		return fmt.Errorf("invalid probeInterval=%q: %w", e.ProbeInterval, err)
	}
	return nil
}

// newPlugin assembles a plugin of type typ named name around d.
func newPlugin(typ, name string, d *discovery.PeerDiscovery, self peers.Self, namespace string, extras Extras, log logr.Logger) (*Plugin, error) {
	p := &Plugin{typedName: fwkplugin.TypedName{Type: typ, Name: name}, discovery: d, extras: extras,
		self: namespace + "/" + self.Name, selfID: self, log: log, debugMux: http.NewServeMux()}
	if extras.ProbeInterval != nil && extras.ProbeInterval.Duration > 0 {
		var err error
		if p.prober, err = reachability.New(reachability.Options{Interval: extras.ProbeInterval.Duration, Instance: name}, log.WithName("reachability")); err != nil {
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
