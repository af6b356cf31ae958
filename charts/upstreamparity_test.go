package charts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/upstreamparity"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// TestEPPContainerAsUpstreams: llm-d-router's own chart (llm-d-router-standalone,
// from the pinned tree) and this chart, given the same values (the defaults,
// tracing on, one and three replicas; standalone mode), deploy the same EPP
// container (args, env, ports, probes, security context, resources, as the API
// server stores them), except where the one list of known differences says why.
// A difference not on the list fails, naming the field and both values; an entry
// that no case needs any more fails too.
func TestEPPContainerAsUpstreams(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "upstream-parity", nil)
	if err != nil {
		t.Fatal(err)
	}
	var all []upstreamparity.Difference
	for _, c := range upstreamparity.Cases {
		t.Run(c.Name, func(t *testing.T) {
			up, err := render.UpstreamDeployment(t.TempDir(), "epp", ns, c.Values())
			if err != nil {
				t.Fatal(err)
			}
			objs, err := render.HelmObjects("epp", ns, c.Values())
			if err != nil {
				t.Fatal(err)
			}
			ours, err := render.EPPDeployment(objs)
			if err != nil {
				t.Fatal(err)
			}
			diffs := upstreamparity.Check(t, "charts/epp, "+c.Name, upstreamparity.Stored(t, env.Clientset, ns, up), upstreamparity.Stored(t, env.Clientset, ns, ours))
			for _, d := range diffs {
				t.Logf("%s", d)
			}
			all = append(all, diffs...)
		})
	}
	if t.Failed() {
		return
	}
	for _, k := range upstreamparity.Unused(all) {
		t.Errorf("known difference %q is not a difference in any case any more: remove it from KnownDifferences (e2e/testsupport/upstreamparity)", k.Field)
	}
}

// TestREADMEShowsTheKnownDifferences: the chart's README (and the template helm-docs
// writes it from) shows the list of known differences as the test checks it.
func TestREADMEShowsTheKnownDifferences(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := upstreamparity.ReadmeBegin + "\n" + upstreamparity.Markdown() + upstreamparity.ReadmeEnd
	for _, f := range []string{"README.md.gotmpl", "README.md"} {
		b, err := os.ReadFile(filepath.Join(root, "charts", "epp", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("charts/epp/%s does not show KnownDifferences as they are: run `make docs`", f)
		}
	}
}
