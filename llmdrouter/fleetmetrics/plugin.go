// Package fleetmetrics is a metrics data source for llm-d-router's data layer that
// scrapes each model server once for the whole fleet of EPP replicas, not once per
// replica: the plugin type fleet-metrics-data-source, in place of upstream's
// metrics-data-source, feeding the same extractors (core-metrics-extractor).
//
// Each server is owned by one live replica, by rendezvous hashing over the replicas
// that run this source (so that when a replica joins or leaves, only the servers it
// wins or held move). The owner scrapes the server every tick as upstream's source
// does, feeds its extractors, and publishes the families they read (Families), with
// the time it read them, over this module's peer-sync connections; every other
// replica feeds the same extractors with them when they arrive, so its scorers see
// what they would have read themselves, older by the time the share took to arrive
// (a few milliseconds). A replica is live while it publishes (a share, or a
// heartbeat when it has nothing to share); when an owner stops (a SIGKILL, a freeze)
// its peers stop counting it after OwnerTTL and its servers move to others, and a
// server whose owner is live but sends nothing for it for OwnerTTL and a tick is
// scraped by each replica itself until shares come again. Without peers, or with share off,
// the source scrapes every server itself, as upstream's does.
//
// One thing differs from what a replica would have read itself: a request this
// replica routes to a server counts in the server's waiting queue
// (WaitingQueueSize) until a reading taken after it. Replicas that share readings
// see the same values at the same moment, and would otherwise all send to the
// server that looks least loaded until the next one (ownrequests.go).
//
//	plugins:
//	  - name: peer-syncer
//	    type: peer-syncer
//	    parameters: {peerDiscoveryRef: peer-discovery}
//	  - name: fleet-metrics
//	    type: fleet-metrics-data-source
//	    parameters: {peerSyncerRef: peer-syncer}
//	  - type: core-metrics-extractor
//	dataLayer:
//	  injectDefaults: false
//	  sources:
//	    - pluginRef: fleet-metrics
//	      extractors: [{pluginRef: core-metrics-extractor}]
//
// Its parameters are upstream's metrics-data-source's (scheme, path, port, TLS,
// interval), with the same meanings, and its own (Parameters).
package fleetmetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwkrc "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	httpsource "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/http"
	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"
	eppmetrics "github.com/llm-d/llm-d-router/pkg/epp/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/params"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// Type is the plugin type.
const Type = "fleet-metrics-data-source"

// Defaults.
const (
	// DefaultOwnerTTL is how long a replica counts a peer as live, and a peer's
	// share of a server as current, without a message: with upstream's 50 ms
	// ticks, five missed scrapes.
	DefaultOwnerTTL = 250 * time.Millisecond
	// stepTimeout bounds a scrape, and each extractor's run, as upstream's source
	// bounds each step.
	stepTimeout = time.Second
	// forgetAfter is how long a server is kept without a Dispatch of it (the
	// runtime does not tell a polling source that an endpoint left).
	forgetAfter = 10 * time.Second
	// window is at most how long a share waits to go to the peers with others.
	window = 2 * time.Millisecond
)

// DefaultFamilies are the families upstream's core-metrics-extractor reads with its
// default engine configurations (vLLM, SGLang, trtllm-serve, Triton with
// TensorRT-LLM, Triton): what a share carries unless Families says otherwise.
var DefaultFamilies = []string{
	"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info", "vllm:cache_config_info",
	"sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage", "sglang:cache_config_info",
	"trtllm_num_requests_waiting", "trtllm_num_requests_running", "trtllm_kv_cache_utilization", "trtllm_kv_cache_tokens_per_block", "trtllm_kv_cache_max_blocks",
	"nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics",
	"nv_inference_pending_request_count", "nv_inference_exec_count",
}

var (
	_ fwkdl.PollingDispatcher = (*Plugin)(nil)
	_ fwkplugin.StateDumper   = (*Plugin)(nil)
	_ fwkplugin.FactoryFunc   = Factory
	_ fwkrc.PreRequest        = (*Plugin)(nil)
)

// Register registers the plugin type in the EPP's plugin registry, with stability
// Beta (as this module's other plugins: no --allow-experimental-plugins needed), as a
// plugin that depends on the peer-syncer its peerSyncerRef names.
func Register() {
	fwkplugin.RegisterWithPluginDependencies(Type, fwkplugin.StabilityBeta, Factory, parseDependencies)
}

// Parameters are the source's own; upstream's metrics-data-source parameters
// (scheme, path, port, insecureSkipVerify, caCertPath, clientCertPath,
// clientKeyPath, interval) sit beside them and mean what they mean there.
type Parameters struct {
	// PeerSyncerRef names this module's peer-syncer plugin whose connections carry
	// the shares. Required unless share is false.
	PeerSyncerRef string `json:"peerSyncerRef" pluginRef:""`
	// Share scrapes each server once for the fleet (default true); false scrapes
	// every server on every replica, as upstream's source does.
	Share *bool `json:"share,omitempty"`
	// Families are the metric families a share carries: those the extractors read.
	// Default: those upstream's core-metrics-extractor reads with its default
	// engine configurations (DefaultFamilies). An extractor configured to read others (engine
	// configurations or custom metrics of its own) needs them listed here: a peer's
	// share holds nothing else.
	Families []string `json:"families,omitempty"`
	// OwnerTTL is how long a peer counts as live, and its share of a server as
	// current, without a message (default 250ms; 50ms to 10s).
	OwnerTTL *params.Duration `json:"ownerTTL,omitempty"`
}

// upstreamParams are the parameter names of upstream's metrics-data-source.
var upstreamParams = []string{"scheme", "path", "port", "insecureSkipVerify", "caCertPath", "clientCertPath", "clientKeyPath", "interval"}

// splitParameters parses raw into ours and upstream's (re-encoded for its factory).
func splitParameters(raw *json.Decoder) (Parameters, []byte, error) {
	var p Parameters
	if raw == nil {
		return p, nil, nil
	}
	all := map[string]json.RawMessage{}
	if err := raw.Decode(&all); err != nil && err.Error() != "EOF" {
		return p, nil, fmt.Errorf("%s parameters: %w", Type, err)
	}
	ours, theirs := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range all {
		if slices.Contains(upstreamParams, k) {
			theirs[k] = v
		} else {
			ours[k] = v
		}
	}
	b, _ := json.Marshal(ours)
	if err := params.Decode(Type, json.NewDecoder(bytes.NewReader(b)), &p); err != nil {
		return p, nil, err
	}
	up, _ := json.Marshal(theirs)
	return p, up, nil
}

func parseDependencies(raw *json.Decoder, _ fwkplugin.Handle) (any, error) {
	p, _, err := splitParameters(raw)
	return &p, err
}

// Plugin is the source.
type Plugin struct {
	typedName fwkplugin.TypedName
	inner     *httpsource.HTTPDataSource[sourcemetrics.PrometheusMetricMap] // upstream's, for its scrape
	bc        *peersync.Broadcast                                           // nil: not sharing
	self      string
	ttl       time.Duration
	keep      map[string]bool
	log       logr.Logger
	m         *instanceMetrics

	extMu sync.RWMutex
	exts  []fwkdl.PollingExtractor[sourcemetrics.PrometheusMetricMap]

	mu        sync.Mutex
	servers   map[string]*server
	heard     liveness
	published atomic.Int64 // unix ns of this replica's last message
}

// server is what the source knows of one model server.
type server struct {
	ep        fwkdl.Endpoint
	seen      time.Time     // its last Dispatch
	period    time.Duration // between its last two Dispatches (the tick)
	firstSeen time.Time
	scrapedAt time.Time // of the data last fed to the extractors (the scraper's clock)
	scrapedBy string    // who read it (this replica or a peer)
	sharedAt  time.Time // when a peer's share of it last arrived
	lastMode  string
	// applyMu orders a reading's extraction and the requests routed to the
	// server (ownrequests.go); routed are those routed since the last reading.
	applyMu sync.Mutex
	routed  []time.Time
}

// Factory builds fleet-metrics-data-source.
func Factory(name string, raw *json.Decoder, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, up, err := splitParameters(raw)
	if err != nil {
		return nil, err
	}
	share := p.Share == nil || *p.Share
	ttl := DefaultOwnerTTL
	if p.OwnerTTL != nil {
		ttl = p.OwnerTTL.Duration
	}
	if ttl < 50*time.Millisecond || ttl > 10*time.Second {
		return nil, fmt.Errorf("%s: invalid ownerTTL=%v: want 50ms to 10s", Type, ttl)
	}
	families := p.Families
	if families == nil {
		families = DefaultFamilies
	}
	keep := map[string]bool{}
	for _, f := range families {
		if f == "" {
			return nil, fmt.Errorf("%s: families: an empty name", Type)
		}
		keep[f] = true
	}
	var upDec *json.Decoder
	if up != nil {
		upDec = json.NewDecoder(bytes.NewReader(up))
	}
	inner, err := sourcemetrics.MetricsDataSourceFactory(name, upDec, handle)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	pl := &Plugin{
		typedName: fwkplugin.TypedName{Type: Type, Name: name},
		inner:     inner.(*httpsource.HTTPDataSource[sourcemetrics.PrometheusMetricMap]),
		ttl:       ttl,
		keep:      keep,
		log:       ctrl.Log.WithName(Type).WithValues("plugin", name),
		m:         metricsFor(name),
		servers:   map[string]*server{},
		heard:     liveness{},
	}
	if !share {
		pl.log.Info("sharing is off (share=false): every server is scraped by this replica")
		return pl, nil
	}
	if p.PeerSyncerRef == "" {
		return nil, fmt.Errorf("%s: peerSyncerRef is required with share on: the name of the peer-syncer plugin whose peer connections carry the shares (or share: false)", Type)
	}
	if handle == nil {
		return nil, fmt.Errorf("%s: no plugin handle", Type)
	}
	ps, ok := handle.Plugin(p.PeerSyncerRef).(*peersyncer.Plugin)
	if !ok {
		return nil, fmt.Errorf("%s: peerSyncerRef=%q names no %s plugin", Type, p.PeerSyncerRef, peersyncer.Type)
	}
	pl.self = ps.Syncer().ID()
	pl.bc, err = ps.Syncer().Broadcast(BroadcastName(name), peersync.BroadcastOptions{
		Window: window, MaxMessageBytes: MaxShareBytes + maxServerName + 16, ReceiveMessage: pl.receive,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Type, err)
	}
	ps.HandleDebugState(DebugPath(name), pl.DumpState)
	ctx := handle.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	go pl.heartbeat(ctx)
	return pl, nil
}

// BroadcastName is the name of the shares' broadcast of the source named name.
func BroadcastName(name string) string { return "metrics/" + name }

// DebugPath is where the source named name serves its state (State, as JSON) on
// the discovery plugin's debugAddress.
func DebugPath(name string) string { return "/debug/fleet-metrics/" + name }

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.typedName }

// Interval implements fwkdl.PollingDispatcher: upstream's interval parameter.
func (p *Plugin) Interval() time.Duration { return p.inner.Interval() }

// AppendExtractor implements fwkdl.PollingDispatcher: the extractors of
// upstream's metrics source (a parsed page in, core-metrics-extractor say).
func (p *Plugin) AppendExtractor(ext fwkplugin.Plugin) error {
	typed, ok := ext.(fwkdl.PollingExtractor[sourcemetrics.PrometheusMetricMap])
	if !ok {
		return fmt.Errorf("%w: extractor %s: want an extractor of %s's pages, got %T", httpsource.ErrExtractorTypeMismatch, ext.TypedName(), sourcemetrics.MetricsDataSourceType, ext)
	}
	p.extMu.Lock()
	defer p.extMu.Unlock()
	p.exts = append(p.exts, typed)
	return nil
}

// Modes of a Dispatch, in epp_fleet_metrics_scrapes_total.
const (
	modeOwned    = "owned"    // this replica owns the server: it scrapes and shares
	modeAlone    = "alone"    // no live peer runs the source (or sharing is off): it scrapes for itself
	modeTakeover = "takeover" // the owner is live but its share is older than the TTL: it scrapes for itself
	modePeer     = "peer"     // a peer owns it and its shares are current: nothing to do
)

// Dispatch implements fwkdl.PollingDispatcher, every tick for every endpoint:
// the servers this replica owns (or whose owner is silent) are scraped and fed
// to the extractors, and those it owns shared; the others' data comes with their
// owners' shares.
func (p *Plugin) Dispatch(ctx context.Context, ep fwkdl.Endpoint) error {
	id := endpointID(ep)
	now := time.Now()
	mode := p.modeOf(id, ep, now)
	if mode == modePeer {
		return nil
	}
	pollCtx, cancel := context.WithTimeout(ctx, stepTimeout)
	fams, err := p.inner.Poll(pollCtx, ep)
	cancel()
	p.m.scrapes.WithLabelValues(mode).Inc()
	if err != nil {
		p.m.scrapeErrors.Inc()
		return err
	}
	at := time.Now()
	p.mu.Lock()
	if s := p.servers[id]; s != nil {
		s.scrapedAt, s.scrapedBy = at, p.self
	}
	p.mu.Unlock()
	if mode == modeOwned {
		p.publish(share{server: id, scrapedAt: at, families: filter(fams, p.keep)})
	}
	p.applyReading(ctx, id, ep, at, fams)
	return nil
}

// endpointID is the server's ID: the same on every replica (namespace/pod-rank-N).
func endpointID(ep fwkdl.Endpoint) string {
	if md := ep.GetMetadata(); md != nil {
		return md.ID.String()
	}
	return ep.String()
}

// modeOf records the server's Dispatch and says what it does.
func (p *Plugin) modeOf(id string, ep fwkdl.Endpoint, now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.servers[id]
	if s == nil {
		p.forgetLocked(now)
		s = &server{firstSeen: now}
		p.servers[id] = s
	}
	if !s.seen.IsZero() {
		s.period = now.Sub(s.seen)
	}
	s.ep, s.seen = ep, now
	// A share is current for the TTL and a tick: with a tick longer than the TTL (a
	// longer --refresh-metrics-interval, or the source's interval), the owner's
	// next share is a tick away, not a TTL.
	current := p.ttl + s.period
	mode, by := modeAlone, p.self
	if p.bc != nil {
		members := p.heard.members(p.self, now, p.ttl)
		if len(members) > 1 {
			by = owner(id, members)
			switch {
			case by == p.self:
				mode = modeOwned
			case now.Sub(s.sharedAt) < current || now.Sub(s.firstSeen) < current:
				// Current, or the server is new here and its owner's next share is
				// on its way.
				mode = modePeer
			default:
				mode = modeTakeover
			}
		}
	}
	if mode != s.lastMode && s.lastMode != "" && (mode == modeTakeover || s.lastMode == modeTakeover) {
		p.log.Info("scraping of a server changed hands", "server", id, "from", s.lastMode, "to", mode, "owner", by)
	}
	s.lastMode = mode
	return mode
}

// forgetLocked drops the servers not dispatched for forgetAfter.
func (p *Plugin) forgetLocked(now time.Time) {
	for id, s := range p.servers {
		if now.Sub(s.seen) > forgetAfter {
			delete(p.servers, id)
		}
	}
}

// publish sends s to the peers.
func (p *Plugin) publish(s share) {
	msg, err := encodeShare(s)
	if err != nil {
		p.m.shares.WithLabelValues("unshareable").Inc()
		p.log.V(1).Info("a scrape is not shared; the peers scrape the server themselves after the TTL", "server", s.server, "error", err.Error())
		return
	}
	p.bc.Publish(msg)
	p.published.Store(time.Now().UnixNano())
	p.m.shares.WithLabelValues("published").Inc()
	p.m.shareBytes.Observe(float64(len(msg)))
}

// heartbeat publishes a heartbeat when this replica has published nothing for a
// quarter of the TTL, until ctx ends.
func (p *Plugin) heartbeat(ctx context.Context) {
	t := time.NewTicker(p.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if now.Sub(time.Unix(0, p.published.Load())) >= p.ttl/4 {
				p.bc.Publish(heartbeatMessage)
				p.published.Store(now.UnixNano())
			}
		}
	}
}

// Reasons a peer's share is not fed to the extractors (epp_fleet_metrics_shares_total).
const (
	shareApplied  = "applied"
	shareUnknown  = "unknown-server" // a server this replica's pool does not list (yet)
	shareOlder    = "older"          // no newer than the sender's share the extractors have
	shareNotOwner = "not-owner"      // from a peer that does not own the server (a view of the members that lags, or a lie)
	shareOwned    = "owned"          // this replica scrapes it itself now
)

// receive takes a peer's message. A message that does not parse, or a share from
// too far ahead of this replica's clock, is refused (the connection closed and
// counted by peer-sync under its reason); a share for a server this replica does
// not know or scrapes itself, from a peer that does not own the server (by this
// replica's view of the members), or no newer than the owner's last one, is
// counted and left. Every message taken counts its sender as live.
func (p *Plugin) receive(m peersync.Message) error {
	now := time.Now()
	if len(m.Data) == 0 {
		return &peersync.RejectError{Reason: "malformed-share", Err: errors.New("an empty message")}
	}
	switch m.Data[0] {
	case kindHeartbeat:
		p.mu.Lock()
		p.heard[m.Peer] = now
		p.mu.Unlock()
		return nil
	case kindShare:
	default:
		return &peersync.RejectError{Reason: "malformed-share", Err: fmt.Errorf("unknown message kind %d", m.Data[0])}
	}
	s, err := decodeShare(m.Data[1:], p.keep)
	if err != nil {
		return &peersync.RejectError{Reason: "malformed-share", Err: err}
	}
	if s.scrapedAt.After(now.Add(maxAhead)) {
		return &peersync.RejectError{Reason: "share-from-the-future", Err: fmt.Errorf("a share of %s read at %v, %v ahead of this replica's clock", s.server, s.scrapedAt, s.scrapedAt.Sub(now))}
	}
	p.mu.Lock()
	p.heard[m.Peer] = now
	srv := p.servers[s.server]
	reason := shareApplied
	switch {
	case srv == nil || srv.ep == nil:
		reason = shareUnknown
	case srv.lastMode == modeOwned || srv.lastMode == modeAlone:
		reason = shareOwned
	case m.Peer != owner(s.server, p.heard.members(p.self, now, p.ttl)):
		reason = shareNotOwner
	case m.Peer == srv.scrapedBy && !s.scrapedAt.After(srv.scrapedAt):
		// Ordered by the owner's clock alone: a new owner's first share counts,
		// whatever the clocks of the one before said.
		reason = shareOlder
	default:
		srv.scrapedAt, srv.scrapedBy, srv.sharedAt = s.scrapedAt, m.Peer, now
	}
	var ep fwkdl.Endpoint
	if srv != nil {
		ep = srv.ep
	}
	p.mu.Unlock()
	p.m.shares.WithLabelValues(reason).Inc()
	if reason != shareApplied {
		return nil
	}
	p.m.shareAge.Observe(max(0, now.Sub(s.scrapedAt).Seconds()))
	p.applyReading(context.Background(), s.server, ep, s.scrapedAt, s.families)
	return nil
}

// extract runs every extractor on fams for ep, each under its own timeout and
// panic recovery, counting failures as upstream's source does.
func (p *Plugin) extract(ctx context.Context, ep fwkdl.Endpoint, fams sourcemetrics.PrometheusMetricMap) {
	p.extMu.RLock()
	exts := slices.Clone(p.exts)
	p.extMu.RUnlock()
	in := fwkdl.PollInput[sourcemetrics.PrometheusMetricMap]{Payload: fams, Endpoint: ep}
	for _, ext := range exts {
		if ctx.Err() != nil {
			return
		}
		func() {
			extCtx, cancel := context.WithTimeout(ctx, stepTimeout)
			defer cancel()
			defer func() {
				if r := recover(); r != nil {
					eppmetrics.RecordDataLayerExtractError(Type, ext.TypedName().Type)
					p.log.Error(fmt.Errorf("%v", r), "extractor panicked", "extractor", ext.TypedName().String(), "stack", string(debug.Stack()))
				}
			}()
			if err := ext.Extract(extCtx, in); err != nil {
				eppmetrics.RecordDataLayerExtractError(Type, ext.TypedName().Type)
				p.log.V(1).Info("extract failed", "extractor", ext.TypedName().String(), "error", err.Error())
			}
		}()
	}
}
