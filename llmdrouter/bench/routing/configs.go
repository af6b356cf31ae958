package main

import (
	"fmt"
	"strings"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
)

// configuration is one way of running the EPP's replicas that the bench compares.
type configuration struct {
	name  string
	title string
	// single: only ever one replica (the ideal every other is measured against).
	single bool
	// control: a configuration the headline rows are compared with to tell their
	// causes apart, run with --control-seeds seeds (fewer, to keep the full bench
	// within its time); the others (one replica, the shared index on either
	// profile) run --seeds.
	control bool
	// syncs: the replicas run peer-syncer (ready when every peer is in sync).
	syncs bool
	// sharesIndex: the replicas share the prefix index (shared-prefix-cache-producer
	// named sharedIndexPlugin; ready when its broadcast is warm).
	sharesIndex bool
	// emulatedPeers (capacity bench only): one real replica, which all the load
	// goes to, and N-1 peers emulated in the bench's process that publish again
	// each placement it publishes (echoPeers): a replica of N that all route at its
	// rate.
	emulatedPeers bool
	// sharesScraping: the replicas scrape each model server once for the fleet
	// (fleet-metrics-data-source), not once each.
	sharesScraping bool
	// config is the EPP configuration of replica r.
	config func(r *eppreplica.Replica) string
	// epp is the EPP build its replicas run ("": the bench's --epp); a baseline
	// twin's (onBaseline) is the capacity bench's --baseline-epp.
	epp string
}

// baselineSuffix ends the name of a configuration on the baseline build.
const baselineSuffix = "-baseline"

// onBaseline is c on the EPP build epp: the capacity bench's twin of c that
// compares this build's cost with an earlier one's (--baseline-epp).
func (c configuration) onBaseline(epp string) configuration {
	c.name += baselineSuffix
	c.title += ", baseline build"
	c.epp = epp
	return c
}

// syncInterval is dataLayer.crossReplicaSyncInterval and peer-syncer's interval:
// llm-d-router's default.
const syncInterval = "200ms"

// defaultProfile is llm-d-router's default scheduling profile as its chart
// (config/charts/routerlib, default-plugins.yaml) renders it for vLLM over HTTP:
// queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3 (which,
// without parameters, makes the runner add approx-prefix-cache-producer, autoTune
// on, and the estimate token producer), the metrics data source over HTTP on
// /metrics and the core metrics extractor; prefixScorer is prefix-cache-scorer's
// entry in the plugins (upstreamPrefixScorer: the default), extra are more plugins,
// profile entries and data layer settings.
func defaultProfile(prefixScorer, extraPlugins, extraProfile, extraDataLayer string) string {
	return `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
` + prefixScorer + metricsSource + `  - type: core-metrics-extractor
` + extraPlugins + `schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
        weight: 2
      - pluginRef: kv-cache-utilization-scorer
        weight: 2
      - pluginRef: prefix-cache-scorer
        weight: 3
` + extraProfile + `dataLayer:
  peerDiscovery:
    pluginRef: peer-discovery
` + extraDataLayer
}

// metricsSource is upstream's metrics data source as llm-d-router's chart
// configures it.
const metricsSource = `  - type: metrics-data-source
    parameters:
      scheme: "http"
      path: "/metrics"
      insecureSkipVerify: true
`

// discovery is this project's endpointslice-peer-discovery plugin on Service
// epp, as the chart's peerDiscovery.enabled adds it.
func discovery(r *eppreplica.Replica) string {
	return fmt.Sprintf(`  - name: peer-discovery
    type: endpointslice-peer-discovery
    parameters:
      service: %s
      debugAddress: %q
      peerSyncAddress: %q
`, eppreplica.Service, r.Debug, r.SyncAddress())
}

// activeRequestScorer is the profile entry of active-request-scorer, the upstream
// scorer of in-flight load, with the weight this project's chart gives it.
const activeRequestScorer = `      - pluginRef: active-request-scorer
        weight: 2
`

// upstreamPrefixScorer is prefix-cache-scorer on upstream's own index (the
// approx-prefix-cache-producer the runner adds).
const upstreamPrefixScorer = "  - type: prefix-cache-scorer\n"

// sharedIndexPlugin is the name of the shared-prefix-cache-producer of the
// shared-index configuration.
const sharedIndexPlugin = "shared-prefix"

// peerSyncerOnly is peer-syncer on the discovery plugin, at the bench's interval;
// its data layer settings are peerSyncerDataLayer.
const peerSyncerOnly = `  - name: peer-syncer
    type: peer-syncer
    parameters:
      peerDiscoveryRef: peer-discovery
      interval: ` + syncInterval + `
`

// peerSyncer is peerSyncerOnly with active-request-scorer (which reads the
// in-flight load it shares), as this project's chart adds them with
// stateSync.enabled.
const peerSyncer = "  - type: active-request-scorer\n" + peerSyncerOnly

// sharedPrefixScorer is prefix-cache-scorer on the shared index:
// shared-prefix-cache-producer with its defaults (autoTune, a 10 ms window,
// bootstrap) over peer-syncer's connections.
const sharedPrefixScorer = `  - name: ` + sharedIndexPlugin + `
    type: shared-prefix-cache-producer
    parameters:
      peerSyncerRef: peer-syncer
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: ` + sharedIndexPlugin + `
`

// readTickParameter follows peerSyncerOnly (or peerSyncer), whose parameters
// it ends, with peer-syncer's readTick at 10 ms.
const readTickParameter = "      readTick: 10ms\n"

// withSharedScraping is cfg (a defaultProfile with peer-syncer) with the model
// servers scraped once for the fleet: fleet-metrics-data-source on peer-syncer in
// place of metrics-data-source (the same parameters), feeding core-metrics-extractor,
// with upstream's injection of metrics-data-source off, as the chart's
// stateSync.sharedScraping.enabled renders it.
func withSharedScraping(cfg string) string {
	out := strings.Replace(cfg, metricsSource, `  - name: fleet-metrics
    type: fleet-metrics-data-source
    parameters:
      peerSyncerRef: peer-syncer
      scheme: "http"
      path: "/metrics"
      insecureSkipVerify: true
`, 1)
	if out == cfg {
		panic("withSharedScraping: the configuration has no metrics source to replace")
	}
	return out + `  injectDefaults: false
  sources:
    - pluginRef: fleet-metrics
      extractors:
        - pluginRef: core-metrics-extractor
`
}

const peerSyncerDataLayer = `  crossReplicaSyncerPluginRef: peer-syncer
  crossReplicaSyncInterval: ` + syncInterval + `
`

var configurations = []configuration{
	{
		name: "single", title: "one replica", single: true,
		config: func(r *eppreplica.Replica) string { return defaultProfile(upstreamPrefixScorer, discovery(r), "", "") },
	},
	{
		// A control for the shared index: one replica with it (no peer: the index
		// is this project's implementation, not upstream's), so that the index's
		// own routing can be told from the effect of sharing it.
		name: "single-shared", title: "one replica + shared prefix index (control)", single: true, control: true, sharesIndex: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncerOnly, "", peerSyncerDataLayer)
		},
	},
	{
		// single-shared on state sync's profile (peer-syncer and
		// active-request-scorer, no peer): the reference that
		// shared-index-loaded-state-sync's ratio isolates the sharing against.
		// Capacity bench.
		name: "single-shared-state-sync", title: "one replica + shared prefix index, state sync's profile (control)", single: true, control: true, syncs: true, sharesIndex: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncer, activeRequestScorer, peerSyncerDataLayer)
		},
	},
	{
		// A control for the configurations with active-request-scorer (peer,
		// shared-index): one replica with their profile, so that what the scorer
		// costs one replica can be told from what active-active costs.
		name: "single-active", title: "one replica + active-request-scorer (control)", single: true, control: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(upstreamPrefixScorer, discovery(r)+"  - type: active-request-scorer\n", activeRequestScorer, "")
		},
	},
	{
		// single-active with peer-syncer (no peer): the scorer reads its in-flight
		// load through the syncer, as the state-sync profile does; it must match
		// single-active, which reads it live.
		name: "single-peer", title: "one replica + peer-syncer + active-request-scorer (control)", single: true, control: true, syncs: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(upstreamPrefixScorer, discovery(r)+peerSyncer, activeRequestScorer, peerSyncerDataLayer)
		},
	},
	{
		// Today's active-active: each replica routes on what it alone saw
		// (upstream's LocalSyncer, the default with no syncer configured).
		name: "local", title: "LocalSyncer (nothing shared)", control: true,
		config: func(r *eppreplica.Replica) string { return defaultProfile(upstreamPrefixScorer, discovery(r), "", "") },
	},
	{
		// A control for peer: its profile (active-request-scorer, weight 2) on
		// upstream's LocalSyncer, so that the scorer's part and the sharing's part
		// of peer's figures can be told apart. Not in the default set.
		name: "local-active", title: "LocalSyncer + active-request-scorer (control)", control: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(upstreamPrefixScorer, discovery(r)+"  - type: active-request-scorer\n", activeRequestScorer, "")
		},
	},
	{
		// In-flight load shared by peer-syncer, and active-request-scorer (weight 2),
		// the upstream scorer that reads it, as this project's chart adds it with
		// stateSync.enabled.
		name: "peer", title: "peer-syncer (in-flight load shared)", syncs: true, control: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(upstreamPrefixScorer, discovery(r)+peerSyncer, activeRequestScorer, peerSyncerDataLayer)
		},
	},
	{
		// The shared index on upstream's default profile (peer-syncer carries it;
		// no active-request-scorer): what a user of upstream's profile gets, and the
		// index's part of shared-index's figures without the scorer's.
		name: "shared-index-default", title: "shared prefix index, default profile", syncs: true, sharesIndex: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncerOnly, "", peerSyncerDataLayer)
		},
	},
	{
		// shared-index-default with each model server scraped once for the fleet
		// (issue 49): fleet-metrics-data-source in place of upstream's metrics
		// source. Against shared-index-default, it shows what scraping once costs
		// the routing (the scorers read a peer's scrape for most servers) and saves
		// the servers and the replicas.
		name: "shared-scraping", title: "shared prefix index + shared scraping, default profile", syncs: true, sharesIndex: true, sharesScraping: true,
		config: func(r *eppreplica.Replica) string {
			return withSharedScraping(defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncerOnly, "", peerSyncerDataLayer))
		},
	},
	{
		// shared-index-default as one replica of N that route as much as it does
		// (issue 39): the capacity bench's measure of the sharing's cost per request
		// at the rates a replica routes near its capacity, which 2 cores cannot
		// give N real replicas. Capacity bench only.
		name: "shared-index-loaded", title: "shared prefix index, default profile, one of N at the full rate (peers emulated)", syncs: true, sharesIndex: true, emulatedPeers: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncerOnly, "", peerSyncerDataLayer)
		},
	},
	{
		// shared-index-loaded on state sync's profile (shared-index's): the
		// in-flight load shared too, which the emulated peers push as the real
		// replica does. Capacity bench only.
		name: "shared-index-loaded-state-sync", title: "shared prefix index, state sync's profile, one of N at the full rate (peers emulated)", syncs: true, sharesIndex: true, emulatedPeers: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncer, activeRequestScorer, peerSyncerDataLayer)
		},
	},
	{
		// shared-index-default with peer-syncer's readTick at 10 ms: the peers'
		// frames read, and the broadcasts flushed, at the ticks of a 10 ms grid in
		// place of a wake-up per frame (issue 39). Not in the default sets: the
		// capacity bench's measure of the tick.
		name: "shared-index-tick", title: "shared prefix index, default profile, 10 ms read tick", syncs: true, sharesIndex: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncerOnly+readTickParameter, "", peerSyncerDataLayer)
		},
	},
	{
		// peer, with the prefix index shared among the replicas over peer-syncer's
		// connections (issue 31): shared-prefix-cache-producer, with its defaults
		// (autoTune, a 10 ms window, bootstrap), read by prefix-cache-scorer in
		// place of upstream's index. (The in-flight producer's prefix discount reads
		// upstream's index, absent here; active-request-scorer counts requests, not
		// tokens, so nothing reads it.)
		name: "shared-index", title: "shared prefix index", syncs: true, sharesIndex: true,
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(sharedPrefixScorer, discovery(r)+peerSyncer, activeRequestScorer, peerSyncerDataLayer)
		},
	},
}

func configurationNamed(name string) (configuration, error) {
	var names []string
	for _, c := range configurations {
		if c.name == name {
			return c, nil
		}
		names = append(names, c.name)
	}
	return configuration{}, fmt.Errorf("unknown configuration %q: want one of %s", name, strings.Join(names, ", "))
}
