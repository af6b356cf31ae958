package kustomize_test

import (
	"context"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/upstreamparity"
)

// TestEPPContainerAsUpstreams: the base's EPP container (and with the tracing
// component) against the one llm-d-router's own chart renders for the same settings
// (three replicas, the base's; standalone mode on the base's model server label;
// tracing on with upstream's default endpoint and sampler), as the API server stores
// both: every difference must be on the one list of known differences
// (e2e/testsupport/upstreamparity), which the chart's README shows.
func TestEPPContainerAsUpstreams(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "upstream-parity", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		components []string
		upstream   map[string]any // values over upstreamparity.Standalone
	}{
		{"base", nil, map[string]any{"epp.replicas": 3}},
		{"base with tracing", []string{"tracing"}, map[string]any{"epp.replicas": 3, "tracing.enabled": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, err := render.UpstreamDeployment(t.TempDir(), "epp", ns, upstreamparity.Standalone(tc.upstream))
			if err != nil {
				t.Fatal(err)
			}
			ours, err := render.EPPDeployment(userOverlay(t, "", "", tc.components...))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range upstreamparity.Check(t, "kustomize/base "+tc.name, upstreamparity.Stored(t, env.Clientset, ns, up), upstreamparity.Stored(t, env.Clientset, ns, ours)) {
				t.Logf("%s", d)
			}
		})
	}
}
