package charts_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// syncerEntry is the configuration's peer-syncer plugin and its dataLayer settings.
func syncerEntry(t *testing.T, r rendered) (entry map[string]any, ref, interval string, profile []string) {
	t.Helper()
	cfg := pluginConfig(t, r)
	for _, p := range cfg["plugins"].([]any) {
		if m := p.(map[string]any); m["type"] == "peer-syncer" {
			entry = m
		}
	}
	if dl, ok := cfg["dataLayer"].(map[string]any); ok {
		ref, _ = dl["crossReplicaSyncerPluginRef"].(string)
		interval, _ = dl["crossReplicaSyncInterval"].(string)
	}
	for _, sp := range cfg["schedulingProfiles"].([]any) {
		for _, p := range sp.(map[string]any)["plugins"].([]any) {
			profile = append(profile, p.(map[string]any)["pluginRef"].(string))
		}
	}
	return entry, ref, interval, profile
}

// TestStateSync: router.epp.stateSync.enabled=true adds the syncer to the EPP's
// configuration (and the in-flight scorer to the chart's default one), hands it the
// peer-sync port, and never a flag; with tls.secretName the Secret is mounted and
// named to the plugin.
func TestStateSync(t *testing.T) {
	off := renderChart(t, vals("router.epp.peerDiscovery.enabled", true))
	if e, ref, _, profile := syncerEntry(t, off); e != nil || ref != "" || slices.Contains(profile, "active-request-scorer") {
		t.Fatalf("without stateSync: syncer %v, ref %q, profile %v", e, ref, profile)
	}

	on := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true))
	e, ref, interval, profile := syncerEntry(t, on)
	if e == nil || e["name"] != "peer-syncer" || ref != "peer-syncer" || interval != "200ms" {
		t.Fatalf("stateSync on: syncer %v, crossReplicaSyncerPluginRef %q, crossReplicaSyncInterval %q", e, ref, interval)
	}
	if p := e["parameters"].(map[string]any); p["peerDiscoveryRef"] != "peer-discovery" || p["interval"] != "200ms" {
		t.Fatalf("syncer parameters %v", p)
	}
	if !slices.Contains(profile, "active-request-scorer") {
		t.Fatalf("the default profile %v lacks active-request-scorer, which reads the shared in-flight load", profile)
	}
	c := render.EPPContainerOf(t, podOf(t, on).Containers)
	if !slices.Equal(c.Args, eppArgs) {
		t.Fatalf("stateSync changed the EPP's args: %v, want %v", c.Args, eppArgs)
	}
	if v, ok := envValue(c, "EPP_PEER_SYNC_ADDRESS"); !ok || v != ":9005" {
		t.Fatalf("EPP_PEER_SYNC_ADDRESS = %q (%v), want :9005 (the syncer listens on the peer-sync port)", v, ok)
	}
	if _, ok := envValue(c, "EPP_PEER_SYNC_TLS_DIR"); ok {
		t.Fatal("EPP_PEER_SYNC_TLS_DIR without a TLS Secret")
	}

	tls := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true,
		"router.epp.stateSync.interval", "100ms", "router.epp.stateSync.tls.secretName", "epp-peer-sync-tls"))
	_, _, interval, _ = syncerEntry(t, tls)
	if interval != "100ms" {
		t.Fatalf("crossReplicaSyncInterval %q, want 100ms", interval)
	}
	d := only[*appsv1.Deployment](t, tls)
	c = render.EPPContainerOf(t, d.Spec.Template.Spec.Containers)
	if v, _ := envValue(c, "EPP_PEER_SYNC_TLS_DIR"); v != "/var/run/epp-peer-sync-tls" {
		t.Fatalf("EPP_PEER_SYNC_TLS_DIR = %q", v)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "peer-sync-tls" && m.MountPath == "/var/run/epp-peer-sync-tls" && m.ReadOnly)
	}
	secret := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		secret = secret || (v.Name == "peer-sync-tls" && v.Secret != nil && v.Secret.SecretName == "epp-peer-sync-tls")
	}
	if !mounted || !secret {
		t.Fatalf("the TLS Secret: mounted %v, volume %v", mounted, secret)
	}

	// A configuration of the user's own gets the syncer, not the scorer.
	own := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true,
		"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": ownConfig}))
	cm := only[*corev1.ConfigMap](t, own)
	if !strings.Contains(cm.Data["mine.yaml"], "crossReplicaSyncerPluginRef: peer-syncer") || strings.Contains(cm.Data["mine.yaml"], "active-request-scorer") {
		t.Fatalf("mine.yaml with stateSync:\n%s", cm.Data["mine.yaml"])
	}
}

const ownConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: token-load-scorer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: token-load-scorer
`

func TestStateSyncRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"without peer discovery", vals("router.epp.stateSync.enabled", true), "needs router.epp.peerDiscovery.enabled=true"},
		{"sidecar mode", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar", "router.epp.args", consumerArgs,
			"router.epp.stateSync.enabled", true), "needs router.epp.peerDiscovery.mode=epp"},
		{"an interval below 10ms", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.interval", "5ms"),
			`router.epp.stateSync.interval="5ms": want at least 10ms`},
		{"an interval that is no duration", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.interval", "fast"),
			"interval"},
		{"a configuration with its own syncer", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true,
			"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": "plugins: []\ndataLayer:\n  crossReplicaSyncerPluginRef: x\n"}),
			"mine.yaml already sets dataLayer.crossReplicaSyncerPluginRef"},
		{"an unknown key", vals("router.epp.stateSync.tls.secret", "x"), "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render.Helm("epp", "team-a", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// sharedPrefix is the configuration's shared-prefix-cache-producer and what each
// prefix-cache-scorer reads (prefixMatchInfoProducerName, "" for the producer the
// EPP would create).
func sharedPrefix(t *testing.T, cfg map[string]any) (producer map[string]any, scorers []string) {
	t.Helper()
	for _, p := range cfg["plugins"].([]any) {
		m := p.(map[string]any)
		switch m["type"] {
		case "shared-prefix-cache-producer":
			producer = m
		case "prefix-cache-scorer":
			params, _ := m["parameters"].(map[string]any)
			name, _ := params["prefixMatchInfoProducerName"].(string)
			scorers = append(scorers, name)
		}
	}
	return producer, scorers
}

// TestSharedPrefixIndex: router.epp.stateSync.sharedPrefixIndex.enabled=true adds
// shared-prefix-cache-producer on the syncer to the EPP's configuration and points
// its prefix-cache-scorer at it (the chart's default configuration and a user's own
// alike), and nothing else: no flag, no env, no port.
func TestSharedPrefixIndex(t *testing.T) {
	sync := vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true)
	off := renderChart(t, sync)
	if p, scorers := sharedPrefix(t, pluginConfig(t, off)); p != nil || !slices.Equal(scorers, []string{""}) {
		t.Fatalf("without sharedPrefixIndex: producer %v, scorers read %q", p, scorers)
	}

	on := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.sharedPrefixIndex.enabled", true))
	p, scorers := sharedPrefix(t, pluginConfig(t, on))
	if p == nil || p["name"] != "shared-prefix" || p["parameters"].(map[string]any)["peerSyncerRef"] != "peer-syncer" {
		t.Fatalf("sharedPrefixIndex on: producer %v, want shared-prefix on peer-syncer", p)
	}
	if !slices.Equal(scorers, []string{"shared-prefix"}) {
		t.Fatalf("sharedPrefixIndex on: the prefix-cache-scorers read %q, want shared-prefix", scorers)
	}
	cOff, cOn := render.EPPContainerOf(t, podOf(t, off).Containers), render.EPPContainerOf(t, podOf(t, on).Containers)
	if !slices.Equal(cOn.Args, cOff.Args) || len(cOn.Env) != len(cOff.Env) || len(cOn.Ports) != len(cOff.Ports) {
		t.Fatalf("sharedPrefixIndex changed the EPP container: args %v, env %v, ports %v", cOn.Args, cOn.Env, cOn.Ports)
	}

	// A configuration of the user's own: its prefix-cache-scorer (by any name) reads
	// the shared index; its other plugins stay as they are.
	own := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.sharedPrefixIndex.enabled", true,
		"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": ownPrefixConfig}))
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(only[*corev1.ConfigMap](t, own).Data["mine.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	p, scorers = sharedPrefix(t, cfg)
	if p == nil || !slices.Equal(scorers, []string{"shared-prefix"}) || !strings.Contains(fmt.Sprint(cfg), "matchLengthWeight:0.5") {
		t.Fatalf("mine.yaml with sharedPrefixIndex: producer %v, scorers read %q:\n%v", p, scorers, cfg)
	}
}

const ownPrefixConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: prefix
    type: prefix-cache-scorer
    parameters: {matchLengthWeight: 0.5}
  - type: max-score-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix
      - pluginRef: max-score-picker
`

func TestSharedPrefixIndexRefusals(t *testing.T) {
	on := func(kv ...any) map[string]any {
		return vals(append([]any{"router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.sharedPrefixIndex.enabled", true}, kv...)...)
	}
	mine := func(content string) []any {
		return []any{"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": content}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"without state sync", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.sharedPrefixIndex.enabled", true),
			"router.epp.stateSync.sharedPrefixIndex.enabled=true needs router.epp.stateSync.enabled=true"},
		{"a configuration without a prefix-cache-scorer", on(mine(ownConfig)...), "mine.yaml has no prefix-cache-scorer to read the index"},
		{"a scorer that reads another producer", on(mine("plugins:\n  - type: prefix-cache-scorer\n    parameters: {prefixMatchInfoProducerName: approx}\n")...),
			`mine.yaml has a prefix-cache-scorer that reads the producer "approx"`},
		{"a configuration with its own shared index", on(mine("plugins:\n  - type: prefix-cache-scorer\n  - {name: idx, type: shared-prefix-cache-producer}\n")...),
			"mine.yaml already has a plugin idx (type shared-prefix-cache-producer)"},
		{"an unknown key", vals("router.epp.stateSync.sharedPrefixIndex.enable", true), "enable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render.Helm("epp", "team-a", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// sharedScraping is the configuration's fleet-metrics-data-source, the types of its
// plugins, and its dataLayer.
func sharedScraping(t *testing.T, cfg map[string]any) (src map[string]any, types []string, dl map[string]any) {
	t.Helper()
	for _, p := range cfg["plugins"].([]any) {
		m := p.(map[string]any)
		types = append(types, fmt.Sprint(m["type"]))
		if m["type"] == "fleet-metrics-data-source" {
			src = m
		}
	}
	dl, _ = cfg["dataLayer"].(map[string]any)
	return src, types, dl
}

// TestSharedScraping: router.epp.stateSync.sharedScraping.enabled=true puts
// fleet-metrics-data-source on the syncer in place of metrics-data-source (its
// parameters carried over), feeds the configuration's core-metrics-extractor from
// it with upstream's injection of metrics-data-source off (which would scrape every
// server on every replica again), and nothing else: no flag, no env, no port.
func TestSharedScraping(t *testing.T) {
	sync := []any{"router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true}
	off := renderChart(t, vals(sync...))
	if src, types, _ := sharedScraping(t, pluginConfig(t, off)); src != nil || !slices.Contains(types, "metrics-data-source") {
		t.Fatalf("without sharedScraping: source %v, plugins %v", src, types)
	}
	on := renderChart(t, vals(append(sync, "router.epp.stateSync.sharedScraping.enabled", true)...))
	src, types, dl := sharedScraping(t, pluginConfig(t, on))
	if src == nil || src["name"] != "fleet-metrics" || fmt.Sprint(src["parameters"]) != "map[peerSyncerRef:peer-syncer]" {
		t.Fatalf("sharedScraping on: source %v, want fleet-metrics on peer-syncer", src)
	}
	if slices.Contains(types, "metrics-data-source") || !slices.Contains(types, "core-metrics-extractor") {
		t.Fatalf("sharedScraping on: plugins %v, want core-metrics-extractor and no metrics-data-source", types)
	}
	if dl["injectDefaults"] != false || fmt.Sprint(dl["sources"]) != "[map[extractors:[map[pluginRef:core-metrics-extractor]] pluginRef:fleet-metrics]]" {
		t.Fatalf("sharedScraping on: dataLayer %v, want injectDefaults false and fleet-metrics feeding core-metrics-extractor", dl)
	}
	cOff, cOn := render.EPPContainerOf(t, podOf(t, off).Containers), render.EPPContainerOf(t, podOf(t, on).Containers)
	if !slices.Equal(cOn.Args, cOff.Args) || len(cOn.Env) != len(cOff.Env) || len(cOn.Ports) != len(cOff.Ports) {
		t.Fatalf("sharedScraping changed the EPP container: args %v, env %v, ports %v", cOn.Args, cOn.Env, cOn.Ports)
	}

	// A configuration of the user's own, with a named metrics source of its own
	// parameters and its own sources: the source's parameters and its extractor
	// stay, the sources read the fleet's source; with the shared index too.
	own := renderChart(t, vals(append(sync, "router.epp.stateSync.sharedScraping.enabled", true, "router.epp.stateSync.sharedPrefixIndex.enabled", true,
		"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": ownScrapeConfig})...))
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(only[*corev1.ConfigMap](t, own).Data["mine.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	src, types, dl = sharedScraping(t, cfg)
	if src == nil || fmt.Sprint(src["parameters"]) != "map[path:/stats peerSyncerRef:peer-syncer port:9090]" {
		t.Fatalf("mine.yaml with sharedScraping: source %v, want mine's path and port on peer-syncer", src)
	}
	if fmt.Sprint(dl["sources"]) != "[map[extractors:[map[pluginRef:extract]] pluginRef:fleet-metrics]]" || slices.Contains(types, "metrics-data-source") || !slices.Contains(types, "shared-prefix-cache-producer") {
		t.Fatalf("mine.yaml with sharedScraping: sources %v, plugins %v", dl["sources"], types)
	}
}

const ownScrapeConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: prefix-cache-scorer
  - type: queue-scorer
  - name: scrape
    type: metrics-data-source
    parameters: {path: /stats, port: 9090}
  - name: extract
    type: core-metrics-extractor
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
      - pluginRef: queue-scorer
dataLayer:
  sources:
    - pluginRef: scrape
      extractors: [{pluginRef: extract}]
`

func TestSharedScrapingRefusals(t *testing.T) {
	on := []any{"router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.sharedScraping.enabled", true}
	mine := func(content string) []any {
		return []any{"router.epp.pluginsConfigFile", "mine.yaml", "router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": content}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"without state sync", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.sharedScraping.enabled", true),
			"router.epp.stateSync.sharedScraping.enabled=true needs router.epp.stateSync.enabled=true"},
		{"a configuration with its own", vals(append(on, mine("plugins:\n  - {name: fm, type: fleet-metrics-data-source}\n")...)...),
			"mine.yaml already has a plugin fm (type fleet-metrics-data-source)"},
		{"two metrics sources", vals(append(on, mine("plugins:\n  - {name: a, type: metrics-data-source}\n  - {name: b, type: metrics-data-source}\n")...)...),
			"mine.yaml has two metrics-data-source plugins"},
		{"an unknown key", vals("router.epp.stateSync.sharedScraping.enable", true), "enable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render.Helm("epp", "team-a", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
