package terraform_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gruntwork-io/terratest/modules/terraform"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/tfenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

func TestFormatted(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts := tfenv.Options(t, filepath.Join(root, "terraform"), nil)
	out, err := terraform.RunTerraformCommandContextE(t, context.Background(), opts, "fmt", "-check", "-recursive", "-diff")
	if err != nil {
		t.Fatalf("terraform fmt -check found unformatted files (run terraform fmt -recursive terraform/):\n%s", out)
	}
}

func TestValidate(t *testing.T) {
	dir := tfenv.CopyModule(t)
	for _, sub := range []string{"terraform", "terraform/examples/basic"} {
		t.Run(sub, func(t *testing.T) {
			opts := tfenv.Options(t, filepath.Join(dir, sub), nil)
			terraform.InitContext(t, context.Background(), opts)
			out := terraform.ValidateContext(t, context.Background(), opts)
			if !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("validate: %s", out)
			}
		})
	}
}

// TestTerraformTest runs tests/plan.tftest.hcl: the values handed to the chart for
// peer discovery off and on, custom service and port, and each invalid variable.
func TestTerraformTest(t *testing.T) {
	dir := filepath.Join(tfenv.CopyModule(t), "terraform")
	opts := tfenv.Options(t, dir, nil)
	terraform.InitContext(t, context.Background(), opts)
	out, err := terraform.RunTerraformCommandContextE(t, context.Background(), opts, "test")
	if err != nil {
		t.Fatalf("terraform test failed:\n%s", out)
	}
	src, err := os.ReadFile(filepath.Join(dir, "tests", "plan.tftest.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	runs := regexp.MustCompile(`(?m)^run "`).FindAll(src, -1)
	if want := fmt.Sprintf("%d passed, 0 failed", len(runs)); len(runs) == 0 || !strings.Contains(out, want) {
		t.Fatalf("terraform test did not pass all %d runs of tests/plan.tftest.hcl (want %q):\n%s", len(runs), want, out)
	}
}

// TestValidationMessages checks that each invalid variable fails the plan with its own
// message, naming the variable.
func TestValidationMessages(t *testing.T) {
	dir := filepath.Join(tfenv.CopyModule(t), "terraform")
	opts := tfenv.Options(t, dir, nil)
	terraform.InitContext(t, context.Background(), opts)
	for _, tc := range []struct {
		name string
		vars map[string]any
		want string
	}{
		{"bad namespace", map[string]any{"namespace": "Team_A"}, "namespace must be a DNS-1123 label"},
		{"replicas 0", map[string]any{"namespace": "ns", "replicas": 0}, "replicas must be a whole number >= 1"},
		{"port 70000", map[string]any{"namespace": "ns", "peer_port": 70000}, "peer_port must be a whole number between 1 and 65535"},
		{"port name", map[string]any{"namespace": "ns", "peer_port_name": "Peer_Sync"}, "peer_port_name must be a port name"},
		{"release name", map[string]any{"namespace": "ns", "release_name": "EPP"}, "release_name must be a DNS-1123 label"},
		{"membership", map[string]any{"namespace": "ns", "peer_membership": "leader"}, `peer_membership must be "ready" or "alive"`},
		{"probe interval", map[string]any{"namespace": "ns", "peer_probe_interval": "5 seconds"}, `peer_probe_interval must be a duration`},
		{"probe interval below 100ms", map[string]any{"namespace": "ns", "peer_probe_interval": "50ms"}, `peer_probe_interval must be at least 100ms`},
		{"probe interval 0", map[string]any{"namespace": "ns", "peer_probe_interval": "0"}, `"0" is not off`},
		{"source", map[string]any{"namespace": "ns", "peer_discovery_source": "gossip"}, `peer_discovery_source must be "endpointslice" or "dns"`},
		{"chart repository", map[string]any{"namespace": "ns", "chart_repository": "registry.example.com"}, `chart_repository must be an http(s):// or oci:// URL`},
		{"state sync without peer discovery", map[string]any{"namespace": "ns", "state_sync_enabled": true}, `state_sync_enabled needs peer_discovery_enabled = true`},
		{"state sync in a sidecar", map[string]any{"namespace": "ns", "state_sync_enabled": true, "peer_discovery_enabled": true, "peer_discovery_mode": "sidecar"}, `state_sync_enabled needs peer_discovery_mode = "epp"`},
		{"state sync interval below 10ms", map[string]any{"namespace": "ns", "state_sync_interval": "5ms"}, `state_sync_interval must be a duration of at least 10ms`},
		{"state sync TLS Secret name", map[string]any{"namespace": "ns", "state_sync_tls_secret_name": "My_Secret"}, `state_sync_tls_secret_name must be a Secret name`},
		{"shared prefix index without state sync", map[string]any{"namespace": "ns", "peer_discovery_enabled": true, "shared_prefix_index_enabled": true}, `shared_prefix_index_enabled needs state_sync_enabled = true`},
		{"tracing endpoint", map[string]any{"namespace": "ns", "tracing_otel_exporter_endpoint": "collector:4317"}, `tracing_otel_exporter_endpoint must be an http:// or https:// URL`},
		{"tracing sampler", map[string]any{"namespace": "ns", "tracing_sampler": "always_on"}, `tracing_sampler must be "parentbased_traceidratio"`},
		{"tracing sampler share", map[string]any{"namespace": "ns", "tracing_sampler_arg": 1.5}, `tracing_sampler_arg must be a share between 0 and 1`},
		{"tracing in a sidecar", map[string]any{"namespace": "ns", "tracing_enabled": true, "peer_discovery_enabled": true, "peer_discovery_mode": "sidecar"}, `tracing_enabled needs peer_discovery_mode = "epp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := *opts
			o.Vars = tc.vars
			out, err := terraform.PlanContextE(t, context.Background(), &o)
			if err == nil {
				t.Fatalf("plan with %v succeeded", tc.vars)
			}
			flat := strings.Join(strings.Fields(out), " ")
			if !strings.Contains(flat, tc.want) {
				t.Fatalf("plan output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
