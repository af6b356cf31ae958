package main

import (
	"errors"
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
	// pending: the configuration's plugins do not exist yet; it is skipped, and
	// the report says so.
	pending bool
	// config is the EPP configuration of replica r.
	config func(r *eppreplica.Replica) string
}

// errNotBuilt marks a configuration whose plugins are still to be written.
var errNotBuilt = errors.New("not built yet")

// syncInterval is dataLayer.crossReplicaSyncInterval and peer-syncer's interval:
// llm-d-router's default.
const syncInterval = "200ms"

// defaultProfile is llm-d-router's default scheduling profile as its chart
// (config/charts/routerlib, default-plugins.yaml) renders it for vLLM over HTTP:
// queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3 (which
// makes the runner add approx-prefix-cache-producer, autoTune on, and the
// estimate token producer), the metrics data source over HTTP on /metrics and
// the core metrics extractor; extra are more plugins and profile entries.
func defaultProfile(extraPlugins, extraProfile, extraDataLayer string) string {
	return `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: prefix-cache-scorer
  - type: metrics-data-source
    parameters:
      scheme: "http"
      path: "/metrics"
      insecureSkipVerify: true
  - type: core-metrics-extractor
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

var configurations = []configuration{
	{
		name: "single", title: "one replica", single: true,
		config: func(r *eppreplica.Replica) string { return defaultProfile(discovery(r), "", "") },
	},
	{
		// Today's active-active: each replica routes on what it alone saw
		// (upstream's LocalSyncer, the default with no syncer configured).
		name: "local", title: "LocalSyncer (nothing shared)",
		config: func(r *eppreplica.Replica) string { return defaultProfile(discovery(r), "", "") },
	},
	{
		// A control for peer: its profile (active-request-scorer, weight 2) on
		// upstream's LocalSyncer, so that the scorer's part and the sharing's part
		// of peer's figures can be told apart. Not in the default set.
		name: "local-active", title: "LocalSyncer + active-request-scorer (control)",
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(discovery(r)+"  - type: active-request-scorer\n", activeRequestScorer, "")
		},
	},
	{
		// In-flight load shared by peer-syncer, and active-request-scorer (weight 2),
		// the upstream scorer that reads it, as this project's chart adds it with
		// stateSync.enabled.
		name: "peer", title: "peer-syncer (in-flight load shared)",
		config: func(r *eppreplica.Replica) string {
			return defaultProfile(discovery(r)+`  - type: active-request-scorer
  - name: peer-syncer
    type: peer-syncer
    parameters:
      peerDiscoveryRef: peer-discovery
      interval: `+syncInterval+`
`, activeRequestScorer, `  crossReplicaSyncerPluginRef: peer-syncer
  crossReplicaSyncInterval: `+syncInterval+`
`)
		},
	},
	{
		// A prefix index shared among the replicas over the peer-sync port (issue
		// 31): the slot is here, the plugin is not.
		name: "shared-index", title: "shared prefix index (issue 31)", pending: true,
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
