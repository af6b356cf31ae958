// Package sharedprefix is an approximate prefix-cache index shared by the replicas of
// an active-active EPP, over the peer-sync connections of this module's peer-syncer:
// the data-producer plugin shared-prefix-cache-producer, which upstream's
// prefix-cache-scorer reads unchanged (prefixMatchInfoProducerName).
//
// Each replica keeps the index as llm-d-router's approx-prefix-cache-producer does
// (the same block hashes, from upstream's prefixhash, the same parameters and
// match, and per server its most recent blocks up to a capacity), and publishes
// every routing decision (PreRequest) to its peers within a short window: the
// request's block hashes, 8 bytes each, and when it was decided. Every block keeps
// the newest decision time seen for it, and a server keeps its newest blocks, so
// that merging placements gives the same index in any order, full servers
// included. What the live placements miss (a connection gap, a backlog, a peer
// that left and came back, a replica that starts), anti-entropy repairs: about once
// a second, and when a connection comes up, each pair of replicas compares digests
// of what they hold, per server and range of hashes, and exchanges the blocks of
// the ranges that differ. /debug/shared-prefix/<name> shows the digests per server
// and when each peer last agreed. A server's capacity is this replica's (its
// configuration or the server's metrics), never a peer's. Endpoints that leave the
// pool leave the index; a placement for an endpoint the pool does not list is left
// out (anti-entropy brings it once the pool lists it).
//
//	plugins:
//	  - name: peer-discovery
//	    type: endpointslice-peer-discovery
//	    parameters: {service: epp, peerSyncAddress: ":9005"}
//	  - name: peer-syncer
//	    type: peer-syncer
//	    parameters: {peerDiscoveryRef: peer-discovery}
//	  - name: shared-prefix
//	    type: shared-prefix-cache-producer
//	    parameters: {peerSyncerRef: peer-syncer}
//	  - type: prefix-cache-scorer
//	    parameters: {prefixMatchInfoProducerName: shared-prefix}
package sharedprefix

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	attrprefix "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/prefixhash"
	tokenproducer "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// Type is the plugin type.
const Type = "shared-prefix-cache-producer"

// Defaults, as llm-d-router's approx-prefix-cache-producer has them.
const (
	DefaultBlockSizeTokens        = 16
	DefaultMaxPrefixBlocksToMatch = 2048
	DefaultMaxPrefixTokensToMatch = 131072
	DefaultLRUCapacityPerServer   = 31250
	// MinBlockSizeTokens is the smallest block the index uses, whatever the
	// configuration or the servers say (llm-d-router #1158).
	MinBlockSizeTokens = 64
	// DefaultWindow is at most how long a decision waits to go to the peers with
	// others (peersync.BroadcastOptions.Window).
	DefaultWindow = 10 * time.Millisecond
	// prefillProfile is the profile whose target llm-d-router's producer also
	// records (P/D disaggregation).
	prefillProfile = "prefill"
	// PoolEvery is how often the pool is read again: an endpoint that left it leaves
	// the index within that, and one that joined takes placements from then on.
	PoolEvery = 500 * time.Millisecond
)

var (
	_ requestcontrol.DataProducer = (*Plugin)(nil)
	_ requestcontrol.PreRequest   = (*Plugin)(nil)
	_ fwkplugin.ConsumerPlugin    = (*Plugin)(nil)
	_ fwkplugin.StateDumper       = (*Plugin)(nil)
	_ fwkplugin.FactoryFunc       = Factory
)

// Register registers the plugin type in the EPP's plugin registry, with stability
// Beta, as a plugin that depends on the peer-syncer its peerSyncerRef names (built
// first).
func Register() {
	fwkplugin.RegisterWithPluginDependencies(Type, fwkplugin.StabilityBeta, Factory, parseDependencies)
}

// Parameters of shared-prefix-cache-producer: those of llm-d-router's
// approx-prefix-cache-producer, with their defaults and meanings, and the syncer.
type Parameters struct {
	// PeerSyncerRef names this module's peer-syncer plugin whose connections carry
	// the placements. Required.
	PeerSyncerRef string `json:"peerSyncerRef" pluginRef:""`
	// AutoTune takes the block size and the LRU capacity per server from the
	// servers' metrics (vllm:cache_config_info) where they give them. Default true.
	AutoTune bool `json:"autoTune"`
	// BlockSizeTokens is the block size without autoTune (at least 64 is used).
	BlockSizeTokens int `json:"blockSizeTokens"`
	// MaxPrefixBlocksToMatch and MaxPrefixTokensToMatch cap the blocks hashed per
	// request; the token cap wins when set, both 0 is no cap.
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch"`
	// LRUCapacityPerServer is a server's capacity in blocks without autoTune.
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
	// Window bounds how long a decision waits to go to the peers with others; the
	// windows fall on a grid of the wall clock, the same on every replica (default
	// 10ms, at most 40ms).
	Window *params.Duration `json:"window,omitempty"`
	// AntiEntropyInterval is how often this replica compares its index with each
	// peer's and repairs what differs (default 1s; 0 turns anti-entropy off, on
	// this replica: a diagnosis, not a setting to run with, since what the live
	// placements miss is then lost). A replica also compares at once with a peer
	// whose connection comes up.
	AntiEntropyInterval *params.Duration `json:"antiEntropyInterval,omitempty"`
	// Bootstrap is accepted for configurations of the version before, and has no
	// effect: a replica that starts fills its index by anti-entropy, from every
	// peer.
	Bootstrap *bool `json:"bootstrap,omitempty"`
}

func defaults() Parameters {
	return Parameters{AutoTune: true, BlockSizeTokens: DefaultBlockSizeTokens, MaxPrefixBlocksToMatch: DefaultMaxPrefixBlocksToMatch,
		MaxPrefixTokensToMatch: DefaultMaxPrefixTokensToMatch, LRUCapacityPerServer: DefaultLRUCapacityPerServer}
}

func parseParameters(raw *json.Decoder) (Parameters, error) {
	p := defaults()
	err := params.Decode(Type, raw, &p)
	return p, err
}

func parseDependencies(raw *json.Decoder, _ fwkplugin.Handle) (any, error) {
	p, err := parseParameters(raw)
	return &p, err
}

// Plugin is the producer.
type Plugin struct {
	typedName fwkplugin.TypedName
	p         Parameters
	dk        fwkplugin.DataKey
	idx       *index
	state     *fwkplugin.PluginState
	bc        *peersync.Broadcast
	ae        *antiEntropy
	ctx       context.Context
	log       logr.Logger
	m         *instanceMetrics

	// offset is added to this replica's clock where it stamps a decision and
	// judges a peer's (ClockOffsetEnv: a fault a test injects).
	offset time.Duration

	pool atomic.Pointer[map[string]struct{}] // the pool's endpoints; nil: not known
	caps sync.Map                            // endpoint -> its capacity by its metrics (autoTune)

	published, publishedBytes, received, dropped, conflicts atomic.Uint64
	pending                                                 sync.WaitGroup // placements being recorded (tests)
}

// Factory builds shared-prefix-cache-producer on the peer-syncer peerSyncerRef names.
func Factory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := parseParameters(raw)
	if err != nil {
		return nil, err
	}
	if p.PeerSyncerRef == "" {
		return nil, fmt.Errorf("%s: peerSyncerRef is required: the name of the peer-syncer plugin (dataLayer.crossReplicaSyncerPluginRef) whose peer connections carry the placements", Type)
	}
	if !p.AutoTune && p.BlockSizeTokens <= 0 {
		return nil, fmt.Errorf("%s: invalid blockSizeTokens=%d: want more than 0 when autoTune is off", Type, p.BlockSizeTokens)
	}
	if p.MaxPrefixBlocksToMatch < 0 || p.MaxPrefixTokensToMatch < 0 || p.LRUCapacityPerServer < 0 {
		return nil, fmt.Errorf("%s: maxPrefixBlocksToMatch, maxPrefixTokensToMatch and lruCapacityPerServer must not be negative", Type)
	}
	window := DefaultWindow
	if p.Window != nil {
		window = p.Window.Duration
	}
	if window < time.Millisecond || window > 40*time.Millisecond {
		return nil, fmt.Errorf("%s: invalid window=%v: want 1ms to 40ms (a decision must reach the peers within 50 ms)", Type, window)
	}
	aeInterval := DefaultAntiEntropyInterval
	if p.AntiEntropyInterval != nil {
		aeInterval = p.AntiEntropyInterval.Duration
	}
	if aeInterval != 0 && (aeInterval < 100*time.Millisecond || aeInterval > time.Minute) {
		return nil, fmt.Errorf("%s: invalid antiEntropyInterval=%v: want 100ms to 1m, or 0 (off)", Type, aeInterval)
	}
	if handle == nil {
		return nil, fmt.Errorf("%s: no plugin handle", Type)
	}
	ps, ok := handle.Plugin(p.PeerSyncerRef).(*peersyncer.Plugin)
	if !ok {
		return nil, fmt.Errorf("%s: peerSyncerRef=%q names no %s plugin", Type, p.PeerSyncerRef, peersyncer.Type)
	}
	ctx := handle.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	pl := &Plugin{
		typedName: fwkplugin.TypedName{Type: Type, Name: name},
		p:         p,
		dk:        attrprefix.PrefixCacheMatchInfoDataKey.WithNonEmptyProducerName(name),
		idx:       newIndex(),
		state:     fwkplugin.NewPluginState(ctx),
		log:       ctrl.Log.WithName(Type).WithValues("plugin", name),
		m:         metricsFor(name),
		ctx:       ctx,
	}
	if v := os.Getenv(ClockOffsetEnv); v != "" {
		if pl.offset, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("%s: invalid %s=%q: want a duration such as \"3s\" or \"-3s\": %w", Type, ClockOffsetEnv, v, err)
		}
		pl.log.Info("this replica's clock is shifted for the shared index's stamps: a fault injected for a test", "env", ClockOffsetEnv, "offset", pl.offset.String())
	}
	pl.ae = newAntiEntropy(pl, aeInterval)
	pl.bc, err = ps.Syncer().Broadcast(BroadcastName(name), peersync.BroadcastOptions{
		Window: window, ReceiveMessage: pl.receive, Connected: pl.ae.connected,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	pl.ae.tr = pl.bc
	ps.HandleDebugState(DebugPath(name), pl.DumpState)
	go pl.followPool(ctx, handle)
	if aeInterval > 0 {
		go pl.ae.run(ctx)
	} else {
		pl.log.Info("anti-entropy is off (antiEntropyInterval=0): what the live placements miss is not repaired")
		pl.ae.markWarm(true)
	}
	go func() {
		select {
		case <-pl.ae.warm:
			pl.log.Info("shared prefix index warm", "after", time.Duration(pl.ae.warmAfter.Load()).Round(time.Millisecond).String(),
				"blocks", pl.idx.entries(), "empty", pl.ae.warmEmpty.Load())
		case <-ctx.Done():
		}
	}()
	return pl, nil
}

// ClockOffsetEnv, when set (a duration, "3s" or "-3s"), shifts this replica's clock
// where the index stamps its decisions and judges its peers': clock skew between
// nodes, injected by the fault tests and the routing bench. It is not a setting to
// run with.
const ClockOffsetEnv = "EPP_SHARED_PREFIX_TEST_CLOCK_OFFSET"

// clock is this replica's time, as the index stamps it.
func (p *Plugin) clock() time.Time { return time.Now().Add(p.offset) }

// BroadcastName is the name of the placements' broadcast of the plugin named name:
// the same on every replica of one configuration.
func BroadcastName(name string) string { return "prefix/" + name }

// DebugPath is where the plugin named name serves its state (State, as JSON) on the
// discovery plugin's debugAddress, beside /debug/peers: without the metrics port's
// authentication, as the rest of that address. The same document is in the EPP's
// /debug/plugins/state.
func DebugPath(name string) string { return "/debug/shared-prefix/" + name }

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.typedName }

// Produces implements fwkplugin.ProducerPlugin: the match info prefix-cache-scorer
// reads (with prefixMatchInfoProducerName set to this plugin's name).
func (p *Plugin) Produces() map[fwkplugin.DataKey]any {
	return map[fwkplugin.DataKey]any{p.dk: attrprefix.PrefixCacheMatchInfo{}}
}

// Consumes implements fwkplugin.ConsumerPlugin: the tokenized request (the runtime
// orders, or creates, the token producer before this one).
func (p *Plugin) Consumes() fwkplugin.DataDependencies {
	return fwkplugin.DataDependencies{Required: map[fwkplugin.DataKey]any{tokenproducer.TokenizedPromptDataKey: fwksched.TokenizedRequest{}}}
}

// requestState carries a request's block hashes, and the blocks each endpoint
// matched, from Produce to PreRequest.
type requestState struct {
	perPrompt [][]blockHash
	matches   map[string]int
	total     int
}

func (s *requestState) Clone() fwkplugin.StateData {
	c := &requestState{perPrompt: make([][]blockHash, len(s.perPrompt)), matches: maps.Clone(s.matches), total: s.total}
	for i, h := range s.perPrompt {
		c.perPrompt[i] = slices.Clone(h)
	}
	return c
}

// Produce implements requestcontrol.DataProducer: for each candidate endpoint, the
// request's leading blocks the index says it holds.
func (p *Plugin) Produce(ctx context.Context, request *fwksched.InferenceRequest, endpoints []fwksched.Endpoint) error {
	blockSize := p.blockSize(endpoints)
	perPrompt := prefixhash.GetBlockHashes(ctx, request, blockSize, p.maxBlocks(blockSize))
	matches := make(map[string]int, len(endpoints))
	total := 0
	for _, hashes := range perPrompt {
		p.idx.match(hashes, matches)
		total += len(hashes)
	}
	for _, e := range endpoints {
		p.learnCapacity(e)
		e.Put(p.dk, attrprefix.NewPrefixCacheMatchInfo(matches[e.GetMetadata().ID.String()], total, blockSize))
	}
	p.state.Write(request.RequestID, fwkplugin.StateKey(p.typedName.Name), &requestState{perPrompt: perPrompt, matches: matches, total: total})
	return nil
}

// PreRequest implements requestcontrol.PreRequest: the decision goes into this
// replica's index and, as the hashes new to the server, to every peer.
func (p *Plugin) PreRequest(ctx context.Context, request *fwksched.InferenceRequest, result *fwksched.SchedulingResult) error {
	defer p.state.Delete(request.RequestID)
	if result == nil {
		return nil
	}
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil || len(primary.TargetEndpoints) == 0 {
		return nil
	}
	targets := []fwksched.Endpoint{primary.TargetEndpoints[0]}
	if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 {
		targets = append(targets, pr.TargetEndpoints[0])
	}
	st, err := fwkplugin.ReadPluginStateKey[*requestState](p.state, request.RequestID, fwkplugin.StateKey(p.typedName.Name))
	if err != nil {
		return nil // no Produce for this request (no tokens): nothing to record
	}
	decided := p.clock()
	type target struct {
		server   string
		capacity int
	}
	ts := make([]target, 0, len(targets))
	for _, e := range targets {
		ts = append(ts, target{server: e.GetMetadata().ID.String(), capacity: p.capacity(e)})
	}
	if st.total > 0 {
		p.m.hitRatio.Observe(float64(st.matches[ts[0].server]) / float64(st.total))
	}
	// Off the request path, as upstream's producer records.
	p.pending.Go(func() {
		for _, t := range ts {
			for _, hashes := range st.perPrompt {
				p.record(t.server, t.capacity, hashes, decided)
			}
		}
	})
	return nil
}

// record routes hashes to server in the index and publishes the placement: every
// hash, in messages within the bounds a peer takes (a prompt longer than one
// message goes in several, each with the position of its first block).
func (p *Plugin) record(server string, capacity int, hashes []blockHash, decided time.Time) {
	at := decided.UnixMicro()
	p.idx.route(server, capacity, hashes, at)
	p.m.placements.WithLabelValues("local").Inc()
	for first := 0; first < len(hashes); first += maxHashesPerMessage {
		part := hashes[first:min(len(hashes), first+maxHashesPerMessage)]
		p.publish(&placement{server: server, capacity: capacity, at: at, first: first, hashes: part})
	}
}

// publish sends pl to the peers.
func (p *Plugin) publish(pl *placement) {
	msg := encodePlacement(pl)
	p.bc.Publish(msg)
	p.m.placementBytes.Observe(float64(len(msg)))
	p.published.Add(1)
	p.publishedBytes.Add(uint64(len(msg)))
}

// receive takes a peer's message: a placement it published, or a message of an
// exchange (anti-entropy). A placement that does not parse, or whose time is
// further in this replica's future than maxStampAhead, is refused: the peer's
// connection is closed (peersync counts it). The server's capacity is this
// replica's: a peer that says otherwise is counted. A placement for an endpoint the
// pool does not list is left out, counted: anti-entropy brings it once the pool
// lists the endpoint.
func (p *Plugin) receive(m peersync.Message) error {
	if m.Kind == peersync.Direct {
		return p.ae.receive(m.Peer, m.Data)
	}
	var pl placement
	if err := parsePlacement(&pl, m.Data); err != nil {
		return err
	}
	if ahead := time.UnixMicro(pl.at).Sub(p.clock()); ahead > maxStampAhead {
		return fmt.Errorf("%w: decided %v ahead of this replica's clock, more than %v", errMalformedPlacement, ahead.Round(time.Second), maxStampAhead)
	}
	if pl.capacity != p.localCapacity(pl.server) {
		p.conflicts.Add(1)
		p.m.conflicts.Inc()
	}
	if !p.inPool(pl.server) {
		p.m.dropped.WithLabelValues("not-in-pool").Inc()
		p.dropped.Add(1)
		return nil
	}
	p.idx.apply(pl.server, p.localCapacity(pl.server), pl.at, pl.first, pl.hashes)
	p.m.placements.WithLabelValues("peer").Inc()
	p.received.Add(1)
	p.m.propagation.Observe(max(0, p.clock().Sub(time.UnixMicro(pl.at)).Seconds()))
	return nil
}

// inPool reports whether the pool lists server (false while the pool is not read
// yet).
func (p *Plugin) inPool(server string) bool {
	pool := p.pool.Load()
	if pool == nil {
		return false
	}
	_, ok := (*pool)[server]
	return ok
}

// poolKnown reports whether the pool was read (an endpoint listed).
func (p *Plugin) poolKnown() bool { return p.pool.Load() != nil }

// poolNames are the pool's endpoints, sorted.
func (p *Plugin) poolNames() []string {
	pool := p.pool.Load()
	if pool == nil {
		return nil
	}
	out := make([]string, 0, len(*pool))
	for name := range *pool {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// maxMessageBytes bounds a message of an exchange (the broadcast's limit).
func (p *Plugin) maxMessageBytes() int { return peersync.DefaultBroadcastMaxMessageBytes }

// followPool reads the pool's endpoints every PoolEvery: an endpoint that left it
// leaves the index (and its series of the per-server metrics go). The pool is not
// known (peers' placements are left out, and anti-entropy waits) until the EPP's
// datastore lists an endpoint: the EPP builds its plugins before the datastore has
// read the pool's pods.
func (p *Plugin) followPool(ctx context.Context, handle fwkplugin.Handle) {
	listed := false
	for {
		names := handle.PodList()
		if listed = listed || len(names) > 0; listed {
			pool := make(map[string]struct{}, len(names))
			for _, n := range names {
				pool[n.String()] = struct{}{}
			}
			p.pool.Store(&pool)
			for _, s := range p.idx.serverNames() {
				if _, ok := pool[s]; !ok {
					p.idx.removeServer(s)
					p.caps.Delete(s)
					p.m.forgetServer(s)
					p.log.V(1).Info("an endpoint left the pool: its blocks left the index", "endpoint", s)
				}
			}
		}
		p.observe()
		select {
		case <-ctx.Done():
			return
		case <-time.After(PoolEvery):
		}
	}
}

// observe sets the gauges of the index: its blocks and what they may take, and
// each server's blocks and digest.
func (p *Plugin) observe() {
	states := p.idx.serverStates()
	blocks, capacity := 0, 0
	for name, st := range states {
		blocks += st.blocks
		capacity += st.capacity
		p.m.serverBlocks.WithLabelValues(name).Set(float64(st.blocks))
		p.m.serverDigest.WithLabelValues(name).Set(float64(st.digest & (1<<52 - 1)))
	}
	p.m.blocks.Set(float64(blocks))
	p.m.capacity.Set(float64(capacity))
	p.m.indexBytes.Set(float64(blocks*bytesPerBlock + len(states)*bytesPerServer))
}

// blockSize is the index's block size: the servers' with autoTune, else the
// configured one, at least MinBlockSizeTokens (as upstream's producer).
func (p *Plugin) blockSize(endpoints []fwksched.Endpoint) int {
	size := p.p.BlockSizeTokens
	if p.p.AutoTune && len(endpoints) > 0 {
		if m := endpoints[0].GetMetrics(); m != nil && m.CacheBlockSize > 0 {
			size = m.CacheBlockSize
		}
	}
	return max(size, MinBlockSizeTokens)
}

// maxBlocks is the cap on blocks hashed per request (as upstream's producer).
func (p *Plugin) maxBlocks(blockSize int) int {
	if p.p.MaxPrefixTokensToMatch > 0 && blockSize > 0 {
		return p.p.MaxPrefixTokensToMatch / blockSize
	}
	if p.p.MaxPrefixBlocksToMatch == 0 {
		return int(^uint(0) >> 1)
	}
	return p.p.MaxPrefixBlocksToMatch
}

// capacity is a server's LRU capacity in blocks (as upstream's producer).
func (p *Plugin) capacity(e fwksched.Endpoint) int {
	if p.p.AutoTune {
		if m := e.GetMetrics(); m != nil && m.CacheNumBlocks > 0 {
			return m.CacheNumBlocks
		}
	}
	return p.configuredCapacity()
}

func (p *Plugin) configuredCapacity() int {
	if p.p.LRUCapacityPerServer > 0 {
		return p.p.LRUCapacityPerServer
	}
	return DefaultLRUCapacityPerServer
}

// learnCapacity remembers the capacity an endpoint's metrics give it (autoTune),
// for the placements of peers for that endpoint.
func (p *Plugin) learnCapacity(e fwksched.Endpoint) {
	if !p.p.AutoTune {
		return
	}
	if m := e.GetMetrics(); m != nil && m.CacheNumBlocks > 0 {
		name := e.GetMetadata().ID.String()
		if v, ok := p.caps.Load(name); !ok || v.(int) != m.CacheNumBlocks {
			p.caps.Store(name, m.CacheNumBlocks)
			// Resized now, not at the server's next write: blocks held beyond it
			// (a replica that held the server at the configured capacity until
			// now) would otherwise differ from its peers' until then.
			p.idx.resize(name, m.CacheNumBlocks)
		}
	}
}

// localCapacity is this replica's capacity for server: by its metrics where they
// gave one (autoTune), else by the configuration. A peer's never counts.
func (p *Plugin) localCapacity(server string) int {
	if v, ok := p.caps.Load(server); ok {
		return v.(int)
	}
	return p.configuredCapacity()
}

// statedCapacity is the capacity this replica states for server in an exchange:
// with autoTune, 0 until it has read the server's from its metrics (on the first
// request it scores). A replica that starts then compares with its peers at once
// and takes their blocks, rather than refusing to compare as if it sized the
// server otherwise (the configured capacity it holds the server at meanwhile);
// once it reads the server's capacity it resizes to it, as its peers have.
func (p *Plugin) statedCapacity(server string) int {
	if !p.p.AutoTune {
		return p.configuredCapacity()
	}
	if v, ok := p.caps.Load(server); ok {
		return v.(int)
	}
	return 0
}

// sizesOtherwise reports whether a peer's root says it sizes the server otherwise
// than this replica: both read the server's capacity and they differ, or neither
// has and their configured capacities differ. One that has read it and one that
// has not yet compare: the second resizes when it reads it.
func (p *Plugin) sizesOtherwise(ri rootInfo) bool {
	mine := p.statedCapacity(ri.Server)
	switch {
	case ri.Capacity != 0 && mine != 0:
		return ri.Capacity != mine
	case ri.Capacity == 0 && mine == 0:
		return ri.Configured != 0 && ri.Configured != p.configuredCapacity()
	}
	return false
}

// Index is what the plugin holds, for the document and the tests.
type Index struct {
	// Warm: an exchange with a peer completed (its index and this one's agreed,
	// or were repaired), or there was no peer to compare with.
	Warm bool `json:"warm"`
	// WarmAfterSeconds is how long after the start it got warm; WarmEmpty: with no
	// peer.
	WarmAfterSeconds float64 `json:"warmAfterSeconds,omitempty"`
	WarmEmpty        bool    `json:"warmEmpty,omitempty"`
	// Blocks held, every server together; per server (at most 100, most first).
	Blocks  int           `json:"blocks"`
	Servers []ServerCount `json:"servers"`
	// Digest is a digest of every server's blocks and their stamps (whatever their
	// order): replicas whose indexes hold the same show the same one.
	Digest string `json:"digest"`
	// Placements published to the peers (and their bytes), and merged from them.
	Published      uint64 `json:"published"`
	PublishedBytes uint64 `json:"publishedBytes"`
	Received       uint64 `json:"received"`
	// Dropped: peers' placements left out (an endpoint the pool does not list).
	Dropped uint64 `json:"dropped"`
	// CapacityConflicts: peers' placements (and exchanges) that gave a server
	// another capacity than this replica's (which stays).
	CapacityConflicts uint64 `json:"capacityConflicts"`
	// AntiEntropyInterval is how often this replica compares with each peer ("0s":
	// off).
	AntiEntropyInterval string `json:"antiEntropyInterval"`
	// Peers are anti-entropy's peers: when each last agreed with this replica.
	Peers []PeerAgreement `json:"peers"`
}

// ServerCount is one server's blocks in the index, its capacity here, and a digest
// of its blocks and their stamps.
type ServerCount struct {
	Server   string `json:"server"`
	Blocks   int    `json:"blocks"`
	Capacity int    `json:"capacity"`
	Digest   string `json:"digest"`
}

// State is what the plugin holds now.
func (p *Plugin) State() Index {
	states := p.idx.serverStates()
	warm := isClosed(p.ae.warm)
	out := Index{Warm: warm, WarmAfterSeconds: time.Duration(p.ae.warmAfter.Load()).Seconds(), WarmEmpty: warm && p.ae.warmEmpty.Load(),
		Blocks: p.idx.entries(), Digest: fmt.Sprintf("%016x", digestOf(states)),
		Published: p.published.Load(), PublishedBytes: p.publishedBytes.Load(), Received: p.received.Load(), Dropped: p.dropped.Load(),
		CapacityConflicts: p.conflicts.Load(), AntiEntropyInterval: p.ae.interval.String(), Servers: []ServerCount{}, Peers: p.ae.agreements(time.Now())}
	for s, st := range states {
		out.Servers = append(out.Servers, ServerCount{Server: s, Blocks: st.blocks, Capacity: st.capacity, Digest: fmt.Sprintf("%016x", st.digest)})
	}
	sort.Slice(out.Servers, func(i, j int) bool {
		if out.Servers[i].Blocks != out.Servers[j].Blocks {
			return out.Servers[i].Blocks > out.Servers[j].Blocks
		}
		return out.Servers[i].Server < out.Servers[j].Server
	})
	if len(out.Servers) > 100 {
		out.Servers = out.Servers[:100]
	}
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// DumpState implements fwkplugin.StateDumper (/debug/plugins/state, and DebugPath):
// block counts and digests per server, never the hashes.
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.Marshal(p.State()) }

// WaitRecorded waits until the decisions made so far are in the index (tests).
func (p *Plugin) WaitRecorded() { p.pending.Wait() }
