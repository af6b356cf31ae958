// Package sharedprefix is an approximate prefix-cache index shared by the replicas of
// an active-active EPP, over the peer-sync connections of this module's peer-syncer:
// the data-producer plugin shared-prefix-cache-producer, which upstream's
// prefix-cache-scorer reads unchanged (prefixMatchInfoProducerName).
//
// Each replica keeps the index as llm-d-router's approx-prefix-cache-producer does
// (the same block hashes, from upstream's prefixhash, and the same LRU per server,
// parameters and match), and publishes every routing decision (PreRequest) to its
// peers within a short window: the block hashes new to the chosen server, about 8
// bytes each. Peers merge them into their own index, so that the next turn of a
// conversation, whichever replica it reaches, finds the server that holds its prefix.
// A replica that starts asks one peer for its whole index before it counts itself
// warm. Endpoints that leave the pool leave the index; a departing peer's placements
// stay, since they describe the servers' caches, not the peer.
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
	// DefaultWindow is how long a decision waits to go to the peers with others.
	DefaultWindow = 10 * time.Millisecond
	// prefillProfile is the profile whose target llm-d-router's producer also
	// records (P/D disaggregation).
	prefillProfile = "prefill"
	// PoolEvery is how often the pool is read again: an endpoint that left it leaves
	// the index within that.
	PoolEvery = 2 * time.Second
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
	// Window is how long a decision waits to go to the peers with others (default
	// 10ms, at most 40ms).
	Window *params.Duration `json:"window,omitempty"`
	// Bootstrap asks one peer for its index when the replica starts. Default true.
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
	log       logr.Logger
	m         *instanceMetrics

	pool atomic.Pointer[map[string]struct{}] // the pool's endpoints; nil: not known

	published, publishedBytes, received, dropped atomic.Uint64
	limits                                       sync.Map       // peer -> *bucket
	pending                                      sync.WaitGroup // placements being recorded (tests)
	buffers                                      sync.Pool      // []blockHash
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
	}
	pl.buffers.New = func() any { b := make([]blockHash, 0, 256); return &b }
	bootstrap := p.Bootstrap == nil || *p.Bootstrap
	pl.bc, err = ps.Syncer().Broadcast(BroadcastName(name), peersync.BroadcastOptions{
		Window: window, Receive: pl.receive, Snapshot: pl.snapshot, Bootstrap: bootstrap,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	go pl.followPool(ctx, handle)
	go func() {
		select {
		case <-pl.bc.Warm():
			pl.log.Info("shared prefix index warm", "after", pl.bc.WarmAfter().Round(time.Millisecond).String(), "blocks", pl.idx.entries())
		case <-ctx.Done():
		}
	}()
	return pl, nil
}

// BroadcastName is the name of the placements' broadcast of the plugin named name:
// the same on every replica of one configuration.
func BroadcastName(name string) string { return "prefix/" + name }

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

// requestState carries a request's block hashes from Produce to PreRequest.
type requestState struct{ perPrompt [][]blockHash }

func (s *requestState) Clone() fwkplugin.StateData {
	c := &requestState{perPrompt: make([][]blockHash, len(s.perPrompt))}
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
		e.Put(p.dk, attrprefix.NewPrefixCacheMatchInfo(matches[e.GetMetadata().ID.String()], total, blockSize))
	}
	p.state.Write(request.RequestID, fwkplugin.StateKey(p.typedName.Name), &requestState{perPrompt: perPrompt})
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
	decided := time.Now()
	type target struct {
		server   string
		capacity int
	}
	ts := make([]target, 0, len(targets))
	for _, e := range targets {
		ts = append(ts, target{server: e.GetMetadata().ID.String(), capacity: p.capacity(e)})
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

// record adds hashes of server to the index and publishes those new to it.
func (p *Plugin) record(server string, capacity int, hashes []blockHash, decided time.Time) {
	buf := p.buffers.Get().(*[]blockHash)
	fresh := p.idx.add(server, capacity, hashes, *buf)
	p.m.placements.WithLabelValues("local").Inc()
	at := decided.UnixMicro()
	for len(fresh) > 0 {
		n := min(len(fresh), maxHashesPerMessage)
		msg := appendPlacement(placement{server: server, capacity: capacity, at: at, hashes: fresh[:n]})
		p.bc.Publish(msg)
		p.m.placementBytes.Observe(float64(len(msg)))
		p.published.Add(1)
		p.publishedBytes.Add(uint64(len(msg)))
		fresh = fresh[n:]
	}
	*buf = fresh[:0]
	p.buffers.Put(buf)
}

// receive merges a peer's placement (or a part of its snapshot).
func (p *Plugin) receive(peer string, msg []byte) error {
	var pl placement
	if err := parsePlacement(&pl, msg); err != nil {
		return err
	}
	origin := "peer"
	if pl.at == 0 {
		origin = "snapshot"
	}
	if origin == "peer" || isClosed(p.bc.Warm()) {
		if !p.allow(peer, len(pl.hashes)) {
			p.m.dropped.WithLabelValues("rate").Inc()
			p.dropped.Add(1)
			return nil
		}
	}
	if pool := p.pool.Load(); pool != nil {
		if _, ok := (*pool)[pl.server]; !ok {
			p.m.dropped.WithLabelValues("not-in-pool").Inc()
			p.dropped.Add(1)
			return nil
		}
	}
	buf := p.buffers.Get().(*[]blockHash)
	*buf = p.idx.add(pl.server, pl.capacity, pl.hashes, *buf)[:0]
	p.buffers.Put(buf)
	p.m.placements.WithLabelValues(origin).Inc()
	p.received.Add(1)
	if pl.at > 0 {
		p.m.propagation.Observe(max(0, time.Since(time.UnixMicro(pl.at)).Seconds()))
	}
	return nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// snapshot gives a peer that starts this replica's index, server by server, oldest
// blocks first.
func (p *Plugin) snapshot(emit func([]byte) bool) {
	p.idx.each(func(server string, capacity int, hashes []blockHash) bool {
		for len(hashes) > 0 {
			n := min(len(hashes), maxHashesPerMessage)
			if !emit(appendPlacement(placement{server: server, capacity: capacity, hashes: hashes[:n]})) {
				return false
			}
			hashes = hashes[n:]
		}
		return true
	})
}

// followPool reads the pool's endpoints every PoolEvery: placements for an endpoint
// it does not have are dropped, and an endpoint that left it leaves the index. The
// pool is not known (nothing is dropped) until the EPP's datastore lists an
// endpoint: the EPP builds its plugins before the datastore has read the pool's
// pods, and a peer's snapshot that arrives meanwhile would be dropped whole.
func (p *Plugin) followPool(ctx context.Context, handle fwkplugin.Handle) {
	t := time.NewTicker(PoolEvery)
	defer t.Stop()
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
					p.log.V(1).Info("an endpoint left the pool: its blocks left the index", "endpoint", s)
				}
			}
		}
		p.m.blocks.Set(float64(p.idx.entries()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
	if p.p.LRUCapacityPerServer > 0 {
		return p.p.LRUCapacityPerServer
	}
	return DefaultLRUCapacityPerServer
}

// Index is what the plugin holds, for the document and the tests.
type Index struct {
	// Warm: a peer's index arrived whole (or there was no peer to ask).
	Warm bool `json:"warm"`
	// WarmAfterSeconds is how long after the start it got warm.
	WarmAfterSeconds float64 `json:"warmAfterSeconds,omitempty"`
	// Blocks held, every server together; per server (at most 100, most first).
	Blocks  int           `json:"blocks"`
	Servers []ServerCount `json:"servers"`
	// Placements published to the peers (and their bytes), and merged from them.
	Published      uint64 `json:"published"`
	PublishedBytes uint64 `json:"publishedBytes"`
	Received       uint64 `json:"received"`
	// Dropped: peers' placements left out (an endpoint not in the pool, a peer over
	// its rate).
	Dropped uint64 `json:"dropped"`
}

// ServerCount is one server's blocks in the index.
type ServerCount struct {
	Server string `json:"server"`
	Blocks int    `json:"blocks"`
}

// State is what the plugin holds now.
func (p *Plugin) State() Index {
	out := Index{Warm: isClosed(p.bc.Warm()), WarmAfterSeconds: p.bc.WarmAfter().Seconds(), Blocks: p.idx.entries(),
		Published: p.published.Load(), PublishedBytes: p.publishedBytes.Load(), Received: p.received.Load(), Dropped: p.dropped.Load(), Servers: []ServerCount{}}
	for s, n := range p.idx.counts() {
		out.Servers = append(out.Servers, ServerCount{Server: s, Blocks: n})
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

// DumpState implements fwkplugin.StateDumper (/debug/plugins/state): block counts
// per server, never the hashes.
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.Marshal(p.State()) }

// WaitRecorded waits until the decisions made so far are in the index (tests).
func (p *Plugin) WaitRecorded() { p.pending.Wait() }
