package terraform_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gruntwork-io/terratest/modules/terraform"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/tfenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/upstreamparity"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// collector is the OTLP endpoint of the tracing case (never dialed: envtest runs no pods).
const collector = "http://otel-collector.monitoring:4317"

// TestApplyAndDestroy applies examples/basic against the real API server with peer
// discovery off, on, on but turned off again by var.values, on with state sync
// (state_sync_enabled), with the shared prefix index too (shared_prefix_index_enabled),
// and with tracing on (tracing_enabled) and one replica: the
// release installs, the Role exists iff peer discovery is on with exactly the
// endpointslices rule, the outputs (read from the release) say so, the Deployment's
// args, env and ports and the EPP configuration are the Helm rendering's, its EPP
// container differs from the one llm-d-router's own chart renders for the same
// settings only as the known differences say (e2e/testsupport/upstreamparity), and
// destroy leaves nothing in the namespace.
func TestApplyAndDestroy(t *testing.T) {
	for _, tc := range []struct {
		name            string
		variable        bool           // peer_discovery_enabled
		values          map[string]any // var.values
		enabled         bool           // what the release ends up with
		wantServiceName string
		stateSync       bool // state_sync_enabled
		sharedPrefix    bool // shared_prefix_index_enabled
		tracing         bool // tracing_enabled, with one replica
	}{
		{"off", false, nil, false, "epp", false, false, false},
		{"on", true, nil, true, "epp", false, false, false},
		{"on, overridden by values", true, map[string]any{"router": map[string]any{"epp": map[string]any{"peerDiscovery": map[string]any{"enabled": false}}}}, false, "epp", false, false, false},
		{"state sync on", true, nil, true, "epp", true, false, false},
		{"state sync and the shared prefix index on", true, nil, true, "epp", true, true, false},
		{"tracing on, one replica", false, nil, false, "epp", false, false, true},
	} {
		enabled := tc.enabled
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(tfenv.CopyModule(t), "terraform", "examples", "basic")
			ctx := context.Background()
			ns, err := env.CreateNamespace(ctx, "tf", nil)
			if err != nil {
				t.Fatal(err)
			}
			opts := tfenv.Options(t, dir, map[string]any{
				"kubeconfig":                  env.Kubeconfig,
				"namespace":                   ns,
				"create_namespace":            false, // envtest runs no namespace controller to finish a namespace deletion
				"peer_discovery_enabled":      tc.variable,
				"state_sync_enabled":          tc.stateSync,
				"shared_prefix_index_enabled": tc.sharedPrefix,
				"wait":                        false, // envtest runs no controllers: no pods become ready
			})
			replicas := 3
			if tc.tracing {
				replicas = 1
				opts.Vars["replicas"] = replicas
				opts.Vars["tracing_enabled"] = true
				opts.Vars["tracing_otel_exporter_endpoint"] = collector
			}
			if tc.values != nil {
				opts.Vars["values"] = tc.values
			}
			terraform.InitContext(t, context.Background(), opts)
			destroyed := false
			t.Cleanup(func() {
				if !destroyed {
					terraform.DestroyContext(t, context.Background(), opts)
				}
			})
			terraform.ApplyAndIdempotentContext(t, context.Background(), opts)

			out := terraform.OutputAllContext(t, context.Background(), opts)
			if out["service_name"] != tc.wantServiceName || out["namespace"] != ns || out["release_name"] != "epp" {
				t.Fatalf("outputs %v", out)
			}
			roleOut, hasRole := out["role_name"]
			if enabled != (hasRole && roleOut != nil) {
				t.Fatalf("role_name output %v with peer discovery %v", roleOut, enabled)
			}

			cs := env.Clientset
			role, err := cs.RbacV1().Roles(ns).Get(ctx, "epp-peer-discovery", metav1.GetOptions{})
			switch {
			case enabled && err != nil:
				t.Fatalf("Role epp-peer-discovery: %v", err)
			case enabled:
				want := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}
				if diff := cmp.Diff(want, role.Rules); diff != "" {
					t.Fatalf("Role rules (-want +got):\n%s", diff)
				}
			case !apierrors.IsNotFound(err):
				t.Fatalf("peer discovery off, yet Role epp-peer-discovery: %v", err)
			}
			roles, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range roles.Items {
				for _, rule := range r.Rules {
					if slices.Contains(rule.Resources, "endpointslices") && (!enabled || r.Name != "epp-peer-discovery") {
						t.Fatalf("Role %s grants endpointslices (peer discovery %v)", r.Name, enabled)
					}
				}
			}

			dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "epp", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The same settings as chart values, in llm-d-router-standalone's
			// standalone mode (which ignores this project's values).
			settings := map[string]any{"epp.peerDiscovery.enabled": enabled, "epp.stateSync.enabled": tc.stateSync,
				"epp.stateSync.sharedPrefixIndex.enabled": tc.sharedPrefix, "epp.replicas": replicas}
			if tc.tracing {
				settings["tracing.enabled"], settings["tracing.otelExporterEndpoint"] = true, collector
			}
			values := upstreamparity.Standalone(settings)
			helmObjs, err := render.HelmObjects("epp", ns, values)
			if err != nil {
				t.Fatal(err)
			}
			// Compare with the Helm rendering as the API server stores it (defaults
			// applied): a server-side dry run in a scratch namespace.
			scratch, err := env.CreateNamespace(ctx, "tf-helm", nil)
			if err != nil {
				t.Fatal(err)
			}
			var want *appsv1.Deployment
			for _, o := range helmObjs {
				if d, ok := o.(*appsv1.Deployment); ok {
					d.Namespace = scratch
					if want, err = cs.AppsV1().Deployments(scratch).Create(ctx, d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, exp := dep.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(exp.Args, got.Args); diff != "" {
				t.Fatalf("args (-helm +terraform):\n%s", diff)
			}
			if diff := cmp.Diff(exp.Env, got.Env); diff != "" {
				t.Fatalf("env (-helm +terraform):\n%s", diff)
			}
			if diff := cmp.Diff(exp.Ports, got.Ports); diff != "" {
				t.Fatalf("ports (-helm +terraform):\n%s", diff)
			}
			// The EPP container beside upstream's chart's for the same settings: only
			// the known differences.
			up, err := render.UpstreamDeployment(t.TempDir(), "epp", ns, upstreamparity.Standalone(settings))
			if err != nil {
				t.Fatal(err)
			}
			upstreamparity.Check(t, "terraform, "+tc.name, upstreamparity.Stored(t, cs, scratch, up), dep)
			if tc.tracing != slices.Contains(got.Args, "--tracing=true") || !slices.Contains(got.Args, "--zap-encoder=json") {
				t.Fatalf("tracing %v: args %v", tc.tracing, got.Args)
			}
			// The EPP configuration (where peer discovery and the syncer are plugins).
			for _, o := range helmObjs {
				if cm, ok := o.(*corev1.ConfigMap); ok {
					applied, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(cm.Data, applied.Data); diff != "" {
						t.Fatalf("ConfigMap %s (-helm +terraform):\n%s", cm.Name, diff)
					}
					if tc.stateSync != strings.Contains(fmt.Sprint(applied.Data), "peer-syncer") {
						t.Fatalf("ConfigMap %s with state sync %v:\n%v", cm.Name, tc.stateSync, applied.Data)
					}
					if tc.sharedPrefix != strings.Contains(fmt.Sprint(applied.Data), "prefixMatchInfoProducerName: shared-prefix") {
						t.Fatalf("ConfigMap %s with the shared prefix index %v:\n%v", cm.Name, tc.sharedPrefix, applied.Data)
					}
				}
			}

			terraform.DestroyContext(t, context.Background(), opts)
			destroyed = true
			assertEmptyNamespace(t, ns)
		})
	}
}

func assertEmptyNamespace(t *testing.T, ns string) {
	t.Helper()
	if left := testenv.Leftovers(context.Background(), env.Clientset, ns); len(left) > 0 {
		t.Errorf("after destroy, left behind in %s: %v", ns, left)
	}
}
