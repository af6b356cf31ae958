package charts_test

import (
	"fmt"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// TestHelmLint runs helm lint (the SDK's, as `helm lint --strict` would) for the
// default and the peer-discovery values: no warnings, no errors.
func TestHelmLint(t *testing.T) {
	dir, err := render.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range map[string]map[string]any{
		"default": nil,
		"enabled": vals("router.epp.peerDiscovery.enabled", true),
		"sidecar": vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"),
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			res := lint.Run([]string{dir}, values)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("helm lint: %v", err)
			}
		})
	}
}

// TestHelmLintRefusesAShortProbeInterval: helm lint (which reads the schema) refuses
// a probe interval below 100ms or of 0, naming the value; it used to pass 50ms.
func TestHelmLintRefusesAShortProbeInterval(t *testing.T) {
	dir, err := render.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"50ms", "0"} {
		lint := action.NewLint()
		lint.Strict = true
		res := lint.Run([]string{dir}, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", v))
		var all []string
		for _, m := range res.Messages {
			all = append(all, m.Error())
		}
		for _, err := range res.Errors {
			all = append(all, err.Error())
		}
		if got := strings.Join(all, "\n"); len(res.Errors) == 0 || !strings.Contains(got, "probeInterval") {
			t.Errorf("helm lint with probeInterval %q: %s", v, fmt.Sprint(all))
		}
	}
}
