package charts_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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
	c := eppContainer(t, podOf(t, on).Containers)
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
	c = eppContainer(t, d.Spec.Template.Spec.Containers)
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
