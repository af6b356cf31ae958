package kustomize_test

import (
	"slices"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/accept"
)

// TestOverlaysAcceptedUnderRestrictedPodSecurity builds each overlay into a namespace
// enforcing the restricted level and has the real API server accept it.
func TestOverlaysAcceptedUnderRestrictedPodSecurity(t *testing.T) {
	c, w := accept.Client(t, env)
	for _, tc := range []struct {
		name       string
		enabled    bool
		components []string
	}{{"default", false, nil}, {"peer-discovery", true, []string{"peer-discovery"}},
		{"alive", true, []string{"peer-discovery", "peer-membership-alive"}},
		{"sidecar", true, []string{"peer-discovery-sidecar"}},
		{"probing", true, []string{"peer-discovery", "peer-probe", "peer-network-policy"}},
		{"sidecar-probing", true, []string{"peer-discovery-sidecar", "peer-probe-sidecar", "peer-network-policy"}},
		{"state-sync", true, []string{"peer-discovery", "state-sync", "peer-network-policy"}},
		{"state-sync-tls", true, []string{"peer-discovery", "state-sync", "state-sync-tls"}},
		{"shared-prefix-index", true, []string{"peer-discovery", "state-sync", "shared-prefix-index"}},
		{"shared-scraping", true, []string{"peer-discovery", "state-sync", "shared-prefix-index", "shared-scraping"}},
		{"tracing", false, []string{"tracing"}},
		// DNS SRV discovery needs no RBAC: no endpointslices rule.
		{"dns", false, []string{"peer-discovery-dns"}},
		{"metrics-auth", true, []string{"peer-discovery", "metrics-auth"}}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := accept.RestrictedNamespace(t, env, "kust-"+tc.name)
			objs := userOverlay(t, ns, "", tc.components...)
			accept.Restricted(t, c, w, objs)
			if tc.enabled && !accept.Can(t, env, ns, "epp", "watch", "discovery.k8s.io", "endpointslices", ns) {
				t.Fatal("the overlay's ServiceAccount cannot watch endpointslices")
			}
			if !tc.enabled && accept.Can(t, env, ns, "epp", "list", "discovery.k8s.io", "endpointslices", ns) {
				t.Fatal("without the component the ServiceAccount can list endpointslices")
			}
			// Metrics auth: the EPP may create TokenReviews and SubjectAccessReviews
			// (cluster-scoped) only with the metrics-auth component.
			auth := slices.Contains(tc.components, "metrics-auth")
			if got := accept.Can(t, env, ns, "epp", "create", "authentication.k8s.io", "tokenreviews", ""); got != auth {
				t.Fatalf("the ServiceAccount can create tokenreviews: %v, want %v", got, auth)
			}
		})
	}
}
