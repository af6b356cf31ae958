// Package sharedprefix is an approximate prefix-cache index shared by the replicas of
// an active-active EPP, over the peer-sync connections of this module's peer-syncer:
// the data-producer plugin shared-prefix-cache-producer, which upstream's
// prefix-cache-scorer reads unchanged (prefixMatchInfoProducerName).
//
// Each replica keeps the index as llm-d-router's approx-prefix-cache-producer does
// (the same block hashes, from upstream's prefixhash, and the same LRU per server,
// parameters and match), and publishes every routing decision (PreRequest) to its
// peers within a short window: the block hashes new to the chosen server, about 8
// bytes each, and the blocks it held already as one touch of their chain (its last
// block and length), so that every replica's LRU keeps what the fleet reuses, as
// one replica that saw all the traffic would. Peers merge them into their own
// index, so that the next turn of a conversation, whichever replica it reaches,
// finds the server that holds its prefix. Nothing is lost to a connection gap (the
// broadcast resends what a peer missed, or resyncs it), and each replica's
// /debug/plugins/state shows a digest of its index per server, which replicas
// compare. A replica that starts asks a warm peer for its whole index before it
// counts itself warm. A server's capacity is this replica's (its configuration or
// the server's metrics), never a peer's. Endpoints that leave the pool leave the
// index; a placement for an endpoint the pool does not list yet is held a while; a
// departing peer's placements stay, since they describe the servers' caches, not
// the peer.
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
	"net/http"
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
	// the index within that.
	PoolEvery = 2 * time.Second
	// HoldFor is how long a peer's placement for an endpoint the pool does not list
	// (yet: a new server, or a pool not read yet) is held, the pool read every
	// heldPoolEvery meanwhile; then it is dropped (not-in-pool).
	HoldFor = 10 * time.Second
	// heldPoolEvery is how often the pool is read while placements are held.
	heldPoolEvery = 250 * time.Millisecond
	// maxHeld bounds the placements held (their blocks) and maxHeldServers the
	// endpoints they name: over either, a placement is dropped (held-overflow).
	maxHeld        = 1 << 22
	maxHeldServers = 1024
)

// holdFor is HoldFor (tests shorten it).
var holdFor = HoldFor

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
	caps sync.Map                            // endpoint -> its capacity by its metrics (autoTune)

	heldMu      sync.Mutex
	heldWake    chan struct{} // a placement was held: read the pool soon
	held        []heldPlacement
	heldBlocks  int
	heldServers map[string]int

	published, publishedBytes, received, dropped, conflicts atomic.Uint64
	limits                                                  sync.Map       // peer -> *bucket
	pending                                                 sync.WaitGroup // placements being recorded (tests)
}

// heldPlacement is a peer's placement for an endpoint the pool does not list yet.
type heldPlacement struct {
	server string
	msg    []byte
	kind   peersync.MessageKind
	until  time.Time
	cost   int
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
		heldWake:  make(chan struct{}, 1),
	}
	bootstrap := p.Bootstrap == nil || *p.Bootstrap
	pl.bc, err = ps.Syncer().Broadcast(BroadcastName(name), peersync.BroadcastOptions{
		Window: window, ReceiveMessage: pl.receive, Snapshot: pl.snapshot, Bootstrap: bootstrap,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	ps.HandleDebug(DebugPath(name), http.HandlerFunc(pl.serveState))
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

// DebugPath is where the plugin named name serves its state (State, as JSON) on the
// discovery plugin's debugAddress, beside /debug/peers: without the metrics port's
// authentication, as the rest of that address. The same document is in the EPP's
// /debug/plugins/state.
func DebugPath(name string) string { return "/debug/shared-prefix/" + name }

func (p *Plugin) serveState(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b, _ := p.DumpState()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

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
	decided := time.Now()
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

// record routes hashes to server in the index and publishes what the peers need to
// do the same (the new blocks, and a touch of those held already), in messages
// within the bounds a peer takes (a long run of new blocks is split, its next part's
// parent the last block of the part before; a touch of more blocks than a message
// takes touches the latest of them).
func (p *Plugin) record(server string, capacity int, hashes []blockHash, decided time.Time) {
	ops := p.idx.route(server, capacity, hashes)
	p.m.placements.WithLabelValues("local").Inc()
	pl := placement{server: server, capacity: capacity, at: decided.UnixMicro()}
	added, touched := 0, 0
	flush := func() {
		if len(pl.ops) > 0 {
			p.publish(&pl)
		}
		pl.ops, added, touched = pl.ops[:0], 0, 0
	}
	for _, o := range ops {
		if o.kind == opTouch {
			o.n = min(o.n, maxTouchPerMessage)
			if touched+o.n > maxTouchPerMessage {
				flush()
			}
			touched += o.n
		}
		for o.kind == opAdd && added+len(o.hashes) > maxHashesPerMessage {
			if k := maxHashesPerMessage - added; k > 0 {
				pl.ops = append(pl.ops, op{kind: opAdd, ref: o.ref, hashes: o.hashes[:k]})
				o.ref, o.hashes = o.hashes[k-1], o.hashes[k:]
			}
			flush()
		}
		added += len(o.hashes)
		pl.ops = append(pl.ops, o)
		if len(pl.ops) == maxOpsPerMessage {
			flush()
		}
	}
	flush()
}

// publish sends pl to the peers.
func (p *Plugin) publish(pl *placement) {
	msg := encodePlacement(pl)
	p.bc.Publish(msg)
	p.m.placementBytes.Observe(float64(len(msg)))
	p.published.Add(1)
	p.publishedBytes.Add(uint64(len(msg)))
}

// receive merges a peer's placement (or a part of its snapshot, or of a resync).
// A live placement counts against the peer's rate; what a snapshot or a resync
// alone may carry (older blocks, no time) comes only in one, which this replica
// asked for. The server's capacity is this replica's: a peer that says otherwise
// is counted. A placement for an endpoint the pool does not list is held.
func (p *Plugin) receive(m peersync.Message) error {
	var pl placement
	if err := parsePlacement(&pl, m.Data); err != nil {
		return err
	}
	solicited := m.Kind == peersync.Snapshot || m.Kind == peersync.Resync
	if pl.snapshotOnly() && !solicited {
		return fmt.Errorf("%w: older blocks, or no time, outside a snapshot", errMalformedPlacement)
	}
	if m.Kind == peersync.Live && !p.allow(m.Peer, pl.cost()) {
		p.m.dropped.WithLabelValues("rate").Inc()
		p.dropped.Add(1)
		return nil
	}
	if pl.capacity != p.localCapacity(pl.server) {
		p.conflicts.Add(1)
		p.m.conflicts.Inc()
	}
	if !p.inPool(pl.server) {
		p.hold(m, pl.server, pl.cost())
		return nil
	}
	p.merge(m.Kind, &pl)
	return nil
}

// merge applies a peer's placement to the index.
func (p *Plugin) merge(kind peersync.MessageKind, pl *placement) {
	p.idx.apply(pl.server, p.localCapacity(pl.server), pl.ops)
	p.m.merged[kind].Inc()
	p.received.Add(1)
	if kind == peersync.Live && pl.at > 0 {
		p.m.propagation.Observe(max(0, time.Since(time.UnixMicro(pl.at)).Seconds()))
	}
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

// hold keeps a peer's placement for an endpoint the pool does not list, within
// maxHeld blocks and maxHeldServers endpoints, for HoldFor.
func (p *Plugin) hold(m peersync.Message, server string, cost int) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	if p.heldServers == nil {
		p.heldServers = map[string]int{}
	}
	if p.heldBlocks+cost > maxHeld || (p.heldServers[server] == 0 && len(p.heldServers) >= maxHeldServers) {
		p.m.dropped.WithLabelValues("held-overflow").Inc()
		p.dropped.Add(1)
		return
	}
	p.held = append(p.held, heldPlacement{server: server, msg: append([]byte(nil), m.Data...), kind: m.Kind, until: time.Now().Add(holdFor), cost: cost})
	p.heldBlocks += cost
	p.heldServers[server]++
	p.m.held.Set(float64(p.heldBlocks))
	select {
	case p.heldWake <- struct{}{}:
	default:
	}
}

// releaseHeld merges the held placements whose endpoint the pool lists now, in
// the order they came, and drops those held past HoldFor.
func (p *Plugin) releaseHeld(now time.Time) int {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	keep := p.held[:0]
	var pl placement
	for _, h := range p.held {
		switch {
		case p.inPool(h.server):
			if parsePlacement(&pl, h.msg) == nil { // it parsed when it came
				p.merge(h.kind, &pl)
			}
		case now.After(h.until):
			p.m.dropped.WithLabelValues("not-in-pool").Inc()
			p.dropped.Add(1)
		default:
			keep = append(keep, h)
			continue
		}
		p.heldBlocks -= h.cost
		if p.heldServers[h.server]--; p.heldServers[h.server] <= 0 {
			delete(p.heldServers, h.server)
		}
	}
	clear(p.held[len(keep):])
	p.held = keep
	p.m.held.Set(float64(p.heldBlocks))
	return len(p.held)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// snapshot gives a peer that starts (or that missed frames no longer kept) this
// replica's index, server by server, the most recent blocks first, each with its
// parent: the peer adds them as its least recent, in that order.
func (p *Plugin) snapshot(emit func([]byte) bool) {
	p.idx.each(func(server string, capacity int, pairs []blockHash) bool {
		for len(pairs) > 0 {
			n := min(len(pairs), maxHashesPerMessage)
			pl := placement{server: server, capacity: capacity, ops: []op{{kind: opOlder, hashes: pairs[:n]}}}
			if !emit(encodePlacement(&pl)) {
				return false
			}
			pairs = pairs[n:]
		}
		return true
	})
}

// followPool reads the pool's endpoints every PoolEvery (every heldPoolEvery while
// placements are held): an endpoint that left it leaves the index, and held
// placements for an endpoint it lists now are merged. The pool is not known (every
// peer's placement is held) until the EPP's datastore lists an endpoint: the EPP
// builds its plugins before the datastore has read the pool's pods, and a peer's
// snapshot that arrives meanwhile must not be lost.
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
					p.log.V(1).Info("an endpoint left the pool: its blocks left the index", "endpoint", s)
				}
			}
		}
		every := PoolEvery
		if p.releaseHeld(time.Now()) > 0 {
			every = heldPoolEvery
		}
		p.m.blocks.Set(float64(p.idx.entries()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		case <-p.heldWake:
			select { // what comes with it, held too
			case <-ctx.Done():
				return
			case <-time.After(heldPoolEvery):
			}
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

// Index is what the plugin holds, for the document and the tests.
type Index struct {
	// Warm: a peer's index arrived whole (or there was no warm peer to ask).
	Warm bool `json:"warm"`
	// WarmAfterSeconds is how long after the start it got warm.
	WarmAfterSeconds float64 `json:"warmAfterSeconds,omitempty"`
	// Blocks held, every server together; per server (at most 100, most first).
	Blocks  int           `json:"blocks"`
	Servers []ServerCount `json:"servers"`
	// Digest is a digest of every server's blocks (whatever their order): replicas
	// whose indexes hold the same blocks for the same servers show the same one.
	Digest string `json:"digest"`
	// Placements published to the peers (and their bytes), and merged from them.
	Published      uint64 `json:"published"`
	PublishedBytes uint64 `json:"publishedBytes"`
	Received       uint64 `json:"received"`
	// Dropped: peers' placements left out (an endpoint not in the pool after
	// HoldFor, a peer over its rate, more held than the bound).
	Dropped uint64 `json:"dropped"`
	// Held: blocks of peers' placements held for an endpoint the pool does not
	// list yet (HeldPlacements: those placements).
	Held           int `json:"held"`
	HeldPlacements int `json:"heldPlacements"`
	// CapacityConflicts: peers' placements that gave a server another capacity
	// than this replica's (which stays).
	CapacityConflicts uint64 `json:"capacityConflicts"`
}

// ServerCount is one server's blocks in the index, its capacity here, and a digest
// of its blocks.
type ServerCount struct {
	Server   string `json:"server"`
	Blocks   int    `json:"blocks"`
	Capacity int    `json:"capacity"`
	Digest   string `json:"digest"`
}

// State is what the plugin holds now.
func (p *Plugin) State() Index {
	p.heldMu.Lock()
	held, heldPlacements := p.heldBlocks, len(p.held)
	p.heldMu.Unlock()
	states := p.idx.serverStates()
	out := Index{Warm: isClosed(p.bc.Warm()), WarmAfterSeconds: p.bc.WarmAfter().Seconds(), Blocks: p.idx.entries(), Digest: fmt.Sprintf("%016x", digestOf(states)),
		Published: p.published.Load(), PublishedBytes: p.publishedBytes.Load(), Received: p.received.Load(), Dropped: p.dropped.Load(),
		Held: held, HeldPlacements: heldPlacements, CapacityConflicts: p.conflicts.Load(), Servers: []ServerCount{}}
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

// DumpState implements fwkplugin.StateDumper (/debug/plugins/state, and DebugPath):
// block counts and digests per server, never the hashes.
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.Marshal(p.State()) }

// WaitRecorded waits until the decisions made so far are in the index (tests).
func (p *Plugin) WaitRecorded() { p.pending.Wait() }
