package charts_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// TestTracingAndLogs: as upstream's chart, llm-d-router's EPP logs JSON and records
// no spans by default (its own default prints every sampled request's spans on
// stdout); router.tracing.enabled sends them to the OTLP endpoint with the sampler
// of the values. flags.zap-encoder and flags.tracing take the chart's place; what
// contradicts itself, or tracing for an EPP container that is the user's (sidecar
// mode), is refused naming the values.
func TestTracingAndLogs(t *testing.T) {
	c := render.EPPContainerOf(t, podOf(t, renderChart(t, nil)).Containers)
	if !slices.Contains(c.Args, "--tracing=false") || !slices.Contains(c.Args, "--zap-encoder=json") {
		t.Fatalf("default args %v: want --tracing=false and --zap-encoder=json", c.Args)
	}
	if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "OTEL_") }) {
		t.Fatalf("default env %v has OTEL_ variables", c.Env)
	}

	on := render.EPPContainerOf(t, podOf(t, renderChart(t, vals("router.tracing.enabled", true,
		"router.tracing.otelExporterEndpoint", "http://collector.monitoring:4317", "router.tracing.sampling.samplerArg", 0.5))).Containers)
	if !slices.Contains(on.Args, "--tracing=true") || slices.Contains(on.Args, "--tracing=false") {
		t.Fatalf("tracing on: args %v", on.Args)
	}
	env := map[string]string{}
	order := map[string]int{}
	for i, e := range on.Env {
		env[e.Name], order[e.Name] = e.Value, i
	}
	for name, want := range map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.monitoring:4317",
		"OTEL_SERVICE_NAME": "llm-d-router/epp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5",
	} {
		if env[name] != want {
			t.Errorf("tracing on: %s=%q, want %q", name, env[name], want)
		}
	}
	// $(NAMESPACE) in OTEL_RESOURCE_ATTRIBUTES expands only when NAMESPACE comes first.
	if !strings.Contains(env["OTEL_RESOURCE_ATTRIBUTES"], "k8s.namespace.name=$(NAMESPACE)") || order["NAMESPACE"] > order["OTEL_RESOURCE_ATTRIBUTES"] {
		t.Errorf("tracing on: OTEL_RESOURCE_ATTRIBUTES=%q at %d, NAMESPACE at %d", env["OTEL_RESOURCE_ATTRIBUTES"], order["OTEL_RESOURCE_ATTRIBUTES"], order["NAMESPACE"])
	}

	mine := render.EPPContainerOf(t, podOf(t, renderChart(t, vals("router.epp.flags", map[string]any{"zap-encoder": "console", "tracing": true}))).Containers)
	if slices.Contains(mine.Args, "--zap-encoder=json") || !slices.Contains(mine.Args, "--zap-encoder=console") ||
		slices.Contains(mine.Args, "--tracing=false") || !slices.Contains(mine.Args, "--tracing=true") {
		t.Fatalf("flags zap-encoder=console, tracing=true: args %v", mine.Args)
	}

	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"flags.tracing with router.tracing", vals("router.tracing.enabled", true, "router.epp.flags", map[string]any{"tracing": false}),
			"router.epp.flags.tracing and router.tracing.enabled=true: set one"},
		{"sidecar mode", vals("router.tracing.enabled", true, "router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"),
			"router.tracing.enabled=true sets the flag and env of llm-d-router's EPP; with router.epp.peerDiscovery.mode=sidecar"},
		{"an empty endpoint", vals("router.tracing.enabled", true, "router.tracing.otelExporterEndpoint", ""), "otelExporterEndpoint"},
		{"a typo", vals("router.tracing.enable", true), "enable"},
	} {
		if _, _, err := render.Helm("epp", "team-a", tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.want)
		}
	}
}
