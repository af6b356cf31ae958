// Package peersyncer is a cross-replica state syncer for llm-d-router's EPP
// (datalayer.CrossReplicaSyncer) over the peers that this module's peer discovery
// finds: the plugin type peer-syncer, built on package peersync of the root module.
//
// The EPP's runtime sets each contributor's local value (llm-d-router's in-flight
// load, say) for every endpoint once per dataLayer.crossReplicaSyncInterval, and reads
// the aggregate on every scheduling decision; with this syncer, that aggregate is the
// sum over every replica of the EPP, not this one's alone.
//
//	plugins:
//	  - name: peer-discovery
//	    type: endpointslice-peer-discovery
//	    parameters: {service: epp, peerSyncAddress: ":9005"}
//	  - name: peer-syncer
//	    type: peer-syncer
//	    parameters: {peerDiscoveryRef: peer-discovery}
//	dataLayer:
//	  peerDiscovery: {pluginRef: peer-discovery}
//	  crossReplicaSyncerPluginRef: peer-syncer
//	  crossReplicaSyncInterval: 200ms
package peersyncer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
)

// Type is the plugin type.
const Type = "peer-syncer"

// Environment variables a parameter left out of the configuration falls back to
// (what a kustomize component or a Helm post-renderer can set).
const (
	// AddressEnv is the discovery plugin's variable for its peerSyncAddress, which
	// the syncer takes over.
	AddressEnv  = peerdiscovery.PeerSyncAddressEnv
	IntervalEnv = "EPP_PEER_SYNC_INTERVAL"
	TLSDirEnv   = "EPP_PEER_SYNC_TLS_DIR"
	// DefaultAddress is the peer-sync port's, where neither the parameters, the
	// discovery plugin nor the environment give one.
	DefaultAddress = ":9005"
	// DefaultReadTick is the readTick parameter's default.
	DefaultReadTick time.Duration = 0
)

var (
	_ fwkdl.CrossReplicaSyncer = (*Plugin)(nil)
	_ fwkplugin.StateDumper    = (*Plugin)(nil)
	_ fwkplugin.FactoryFunc    = Factory
)

// Register registers the plugin type in the EPP's plugin registry, with stability
// Beta (no --allow-experimental-plugins needed), as a plugin that depends on the
// peer discovery its peerDiscoveryRef names (built first).
func Register() {
	fwkplugin.RegisterWithPluginDependencies(Type, fwkplugin.StabilityBeta, Factory, parseDependencies)
}

// Parameters of peer-syncer.
type Parameters struct {
	// PeerDiscoveryRef names the peer-discovery plugin (of this module) whose peers
	// are the membership: the one dataLayer.peerDiscovery.pluginRef names. Required.
	PeerDiscoveryRef string `json:"peerDiscoveryRef" pluginRef:""`
	// Address is listened on for the peers' pushes: the peer-sync port. Default: the
	// discovery plugin's peerSyncAddress (its parameter, else EPP_PEER_SYNC_ADDRESS),
	// which the syncer then serves, probes included; else ":9005".
	Address string `json:"address,omitempty"`
	// Interval is how often this replica pushes to its peers: set it to
	// dataLayer.crossReplicaSyncInterval. Default 200ms (env EPP_PEER_SYNC_INTERVAL).
	Interval *params.Duration `json:"interval,omitempty"`
	// TTL is how long a silent peer's values count. Default 3 × interval.
	TTL *params.Duration `json:"ttl,omitempty"`
	// MaxMessageBytes and MaxValueBytes bound what a peer may send (defaults 4 MiB and
	// 4 KiB).
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	MaxValueBytes   int `json:"maxValueBytes,omitempty"`
	// MaxEntries caps the (key, endpoint) entries one peer may define (default
	// 131072); within it a peer may define twice this replica's entries plus 256,
	// and at least 4096. MaxKeys caps the state keys one peer may define (default
	// 64).
	MaxEntries int `json:"maxEntries,omitempty"`
	MaxKeys    int `json:"maxKeys,omitempty"`
	// ReadTick: the peers' frames are read, and the broadcasts (the shared prefix
	// index's placements) flushed, at the ticks of a grid of this period, the same
	// on every replica, rather than each frame when it arrives; a replica then wakes
	// once a tick for all its peers, not once a frame (docs/DECISIONS.md, "Capacity
	// of active-active replicas"). Adds up to a tick to a placement's way to the
	// peers. Default 0: each frame is read when it arrives; else 1ms to 100ms. The
	// capacity bench measures it when asked (--configs=single,shared-index-tick): a
	// lower CPU cost per request for a higher idle cost per replica, worth it only
	// for a fleet that routes near its CPU limit (docs/DECISIONS.md).
	ReadTick *params.Duration `json:"readTick,omitempty"`
	// TLSDir, if set, turns on mutual TLS with the ca.crt, tls.crt and tls.key of a
	// Secret mounted there (env EPP_PEER_SYNC_TLS_DIR); TLSServerName, if set, is the
	// name the peers' certificates must hold. TLSRequireReplicaName binds each
	// peer's certificate to the replica it claims to be (per-pod certificates: a DNS
	// name <pod>.<namespace>[.…] or a URI ending /ns/<namespace>/pod/<pod>).
	TLSDir                string `json:"tlsDir,omitempty"`
	TLSServerName         string `json:"tlsServerName,omitempty"`
	TLSRequireReplicaName bool   `json:"tlsRequireReplicaName,omitempty"`
}

// Plugin is the syncer.
type Plugin struct {
	typedName fwkplugin.TypedName
	s         *peersync.Syncer
	handle    fwkplugin.Handle
	pd        *peerdiscovery.Plugin
	live      sync.Once // the contributors' live values, learned at the first Get
}

func parseParameters(parameters *json.Decoder) (Parameters, error) {
	var p Parameters
	err := params.Decode(Type, parameters, &p)
	return p, err
}

// parseDependencies tells the EPP's configuration loader to build the discovery
// plugin first.
func parseDependencies(parameters *json.Decoder, _ fwkplugin.Handle) (any, error) {
	p, err := parseParameters(parameters)
	return &p, err
}

// Factory builds peer-syncer: it checks the parameters (errors name the parameter
// or the variable), listens on the peer-sync address, and runs until the EPP's
// context (the handle's) ends.
func Factory(name string, parameters *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := parseParameters(parameters)
	if err != nil {
		return nil, err
	}
	if p.PeerDiscoveryRef == "" {
		return nil, fmt.Errorf("%s: peerDiscoveryRef is required: the name of the peer-discovery plugin (dataLayer.peerDiscovery.pluginRef) whose peers this syncer shares state with", Type)
	}
	if handle == nil {
		return nil, fmt.Errorf("%s: no plugin handle", Type)
	}
	pd, ok := handle.Plugin(p.PeerDiscoveryRef).(*peerdiscovery.Plugin)
	if !ok {
		return nil, fmt.Errorf("%s: peerDiscoveryRef=%q names no peer-discovery plugin of this module (of type %s)", Type, p.PeerDiscoveryRef, strings.Join(peerdiscovery.Types(), ", "))
	}
	interval := peersync.DefaultInterval
	switch env := os.Getenv(IntervalEnv); {
	case p.Interval != nil:
		interval = p.Interval.Duration
	case env != "":
		d, err := time.ParseDuration(env)
		if err != nil {
			return nil, fmt.Errorf("invalid %s=%q: not a duration (e.g. 200ms)", IntervalEnv, env)
		}
		interval = d
	}
	if err := peersync.CheckInterval(interval); err != nil {
		return nil, fmt.Errorf("invalid interval=%v: %w", interval, err)
	}
	var ttl time.Duration
	if p.TTL != nil {
		ttl = p.TTL.Duration
		if err := peersync.CheckTTL(ttl, interval); err != nil {
			return nil, fmt.Errorf("invalid ttl=%v: %w", ttl, err)
		}
	}
	readTick := DefaultReadTick
	if p.ReadTick != nil {
		readTick = p.ReadTick.Duration
		if err := peersync.CheckReadTick(readTick); err != nil {
			return nil, fmt.Errorf("invalid readTick=%v: %w", readTick, err)
		}
	}
	if p.TLSRequireReplicaName && p.TLSDir == "" && os.Getenv(TLSDirEnv) == "" {
		return nil, fmt.Errorf("%s: tlsRequireReplicaName needs mutual TLS: set tlsDir (or %s)", Type, TLSDirEnv)
	}
	var tlsFiles *peersync.TLSFiles
	tlsDir, tlsParam := p.TLSDir, "tlsDir"
	if tlsDir == "" {
		tlsDir, tlsParam = os.Getenv(TLSDirEnv), TLSDirEnv
	}
	if tlsDir != "" {
		tlsFiles = peersync.TLSFilesInDir(tlsDir)
		tlsFiles.ServerName = p.TLSServerName
		tlsFiles.RequireReplicaName = p.TLSRequireReplicaName
		if err := tlsFiles.Check(); err != nil {
			return nil, fmt.Errorf("invalid %s=%q: %w", tlsParam, tlsDir, err)
		}
	}
	// The discovery plugin stops answering on the peer-sync address: the syncer
	// listens there now (and answers the probes the same way).
	discoveryAddress := pd.TakePeerSyncAddress()
	addr, addrParam := p.Address, "address"
	switch {
	case addr != "":
	case discoveryAddress != "":
		addr, addrParam = discoveryAddress, p.PeerDiscoveryRef+".peerSyncAddress"
	default:
		addr = DefaultAddress
	}
	if err := params.CheckAddress(addrParam, addr, DefaultAddress); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %s=%s: %w", Type, addrParam, addr, err)
	}
	log := ctrl.Log.WithName(Type).WithValues("plugin", name)
	self := pd.Self()
	s, err := peersync.New(peersync.Options{
		Self: self, Peers: pd.Peers(), Listener: l, Interval: interval, TTL: ttl,
		MaxMessageBytes: p.MaxMessageBytes, MaxValueBytes: p.MaxValueBytes, MaxEntries: p.MaxEntries, MaxKeys: p.MaxKeys,
		ReadTick: readTick, TLS: tlsFiles, PeersReady: pd.Ready(), SelfListed: pd.SelfListed, SourceAddress: sourceAddress(self), Instance: name, Log: log,
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	plugin := &Plugin{typedName: fwkplugin.TypedName{Type: Type, Name: name}, s: s, handle: handle, pd: pd}
	pd.HandleDebug("/debug/peer-sync", plugin)
	ctx := handle.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	go plugin.run(ctx, pd, log, addr)
	return plugin, nil
}

func (p *Plugin) run(ctx context.Context, pd *peerdiscovery.Plugin, log logr.Logger, addr string) {
	go func() {
		select {
		case <-pd.Ready():
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
			log.Info("the peer discovery has not delivered a peer set after 30 s: is it the plugin dataLayer.peerDiscovery.pluginRef names?", "peerDiscoveryRef", pd.TypedName().Name)
		}
	}()
	log.Info("sharing state with the peers", "address", addr, "interval", p.s.Interval(), "ttl", p.s.TTL(), "peerDiscovery", pd.TypedName().Name)
	if err := p.s.Run(ctx); err != nil {
		log.Error(err, "cross-replica syncer stopped: this replica no longer shares state")
	}
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.typedName }

// Set implements fwkdl.CrossReplicaSyncer: this replica's value, pushed to every
// peer in the next interval.
func (p *Plugin) Set(_ context.Context, key fwkdl.StateKey, endpointID string, value any) error {
	return p.s.Set(string(key), endpointID, value)
}

// Get implements fwkdl.CrossReplicaSyncer: aggregate over this replica's value and
// every live peer's latest one, decoded as the type of this replica's. This
// replica's value is its contributor's live one (its Supply, read now), not the one
// the runtime Set at the last interval: without a syncer the runtime reads the live
// value, and a replica must not be blind to its own decisions of the last 200 ms
// (active-request-scorer would see none of its own requests sent meanwhile).
func (p *Plugin) Get(_ context.Context, key fwkdl.StateKey, endpointID string, aggregate func([]any) any) (any, bool, error) {
	p.live.Do(p.learnLive)
	v, ok := p.s.Get(string(key), endpointID, aggregate)
	return v, ok, nil
}

// learnLive gives the syncer each contributor's live value (the EPP's plugins are
// all built by the first Get).
func (p *Plugin) learnLive() {
	for _, pl := range p.handle.GetAllPlugins() {
		c, ok := pl.(fwkdl.CrossReplicaContributor)
		if !ok {
			continue
		}
		spec := c.CrossReplicaState()
		if spec.SyncDisabled || spec.Supply == nil {
			continue
		}
		supply := spec.Supply
		p.s.SetLocalReader(string(spec.StateKey), func(endpoint string) any { return supply(endpoint)() })
	}
}

// Delete implements fwkdl.CrossReplicaSyncer: the value goes here and, with the
// next push, on every peer.
func (p *Plugin) Delete(_ context.Context, key fwkdl.StateKey, endpointID string) error {
	p.s.Delete(string(key), endpointID)
	return nil
}

// Syncer is the syncer behind the plugin.
func (p *Plugin) Syncer() *peersync.Syncer { return p.s }

// HandleDebug serves h at path on the discovery plugin's debugAddress, beside
// /debug/peers and /debug/peer-sync (a plugin built on this syncer shows its state
// there).
func (p *Plugin) HandleDebug(path string, h http.Handler) { p.pd.HandleDebug(path, h) }

// HandleDebugState serves, at path on the discovery plugin's debugAddress, the
// JSON document dump gives (a plugin's fwkplugin.StateDumper): GET and HEAD only.
func (p *Plugin) HandleDebugState(path string, dump func() (json.RawMessage, error)) {
	p.HandleDebug(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		b, _ := dump()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	}))
}

// learnAggregates gives the document the aggregates of the EPP's contributors.
func (p *Plugin) learnAggregates() {
	for _, pl := range p.handle.GetAllPlugins() {
		if c, ok := pl.(fwkdl.CrossReplicaContributor); ok {
			spec := c.CrossReplicaState()
			if !spec.SyncDisabled && spec.Aggregate != nil {
				p.s.SetAggregate(string(spec.StateKey), spec.Aggregate)
			}
		}
	}
}

// ServeHTTP serves /debug/peer-sync (on the discovery plugin's debugAddress).
func (p *Plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.learnAggregates()
	p.s.ServeHTTP(w, r)
}

// DumpState implements fwkplugin.StateDumper (the EPP's /debug/plugins/state): the
// membership and, per key, how many endpoints it holds; /debug/peer-sync has the
// values.
func (p *Plugin) DumpState() (json.RawMessage, error) {
	doc := p.s.Document("", "")
	type keySummary struct {
		Key       string `json:"key"`
		Endpoints int    `json:"endpoints"`
	}
	out := struct {
		Self     string                `json:"self"`
		Interval string                `json:"interval"`
		TTL      string                `json:"ttl"`
		Peers    []peersync.PeerStatus `json:"peers"`
		Keys     []keySummary          `json:"keys"`
	}{Self: doc.Self, Interval: doc.Interval, TTL: doc.TTL, Peers: doc.Peers, Keys: []keySummary{}}
	for _, k := range doc.Keys {
		out.Keys = append(out.Keys, keySummary{Key: k.Key, Endpoints: len(k.Endpoints)})
	}
	return json.Marshal(out)
}

// sourceAddress binds the connections to a peer to this replica's own address of the
// peer's family, where that address is this host's (a pod's IP is; so are addresses
// on a loopback that holds a range for several replicas on one machine): the peers
// accept only the address their discovery lists for this replica. An address that
// cannot be bound is left to the system's choice.
func sourceAddress(self peers.Self) func(peers.PeerMetadata) net.IP {
	var own []netip.Addr
	for _, a := range self.Addresses {
		a = a.Unmap()
		if l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String()); err == nil {
			l.Close()
			own = append(own, a)
		}
	}
	return func(p peers.PeerMetadata) net.IP {
		pa, err := netip.ParseAddr(p.Address)
		if err != nil {
			return nil
		}
		for _, a := range own {
			if a.Is4() == pa.Unmap().Is4() {
				return net.IP(a.AsSlice())
			}
		}
		return nil
	}
}
