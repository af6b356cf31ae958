//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gruntwork-io/terratest/modules/helm"
	"github.com/gruntwork-io/terratest/modules/k8s"
	"github.com/gruntwork-io/terratest/modules/terraform"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/tfenv"
)

// channel deploys the EPP with one tool. Names follow the defaults: release "epp",
// Deployment, Service and ServiceAccount "epp".
type channel interface {
	name() string
	// createsNamespace: the channel creates (and deletes) the namespace itself.
	createsNamespace() bool
	install(t *testing.T, ns string, enabled bool, replicas int)
	scale(t *testing.T, ns string, replicas int)
	uninstall(t *testing.T, ns string)
}

func channels() []channel { return []channel{&helmChannel{}, &kustomizeChannel{}, &terraformChannel{}} }

func kubectlOptions(ns string) *k8s.KubectlOptions {
	return k8s.NewKubectlOptions(kubeContext, kubeconfig, ns)
}

// helmChannel: `helm install epp charts/epp --set router.epp.peerDiscovery.enabled=...`.
type helmChannel struct{ enabled bool }

func (*helmChannel) name() string           { return "helm" }
func (*helmChannel) createsNamespace() bool { return false }

func (h *helmChannel) options(ns string, replicas int) *helm.Options {
	return &helm.Options{
		KubectlOptions: kubectlOptions(ns),
		SetValues: map[string]string{
			"router.epp.peerDiscovery.enabled": strconv.FormatBool(h.enabled),
			"router.epp.replicas":              strconv.Itoa(replicas),
		},
		ExtraArgs: map[string][]string{
			"install": {"--wait", "--timeout", "3m"},
			"upgrade": {"--wait", "--timeout", "3m"},
		},
	}
}

func (h *helmChannel) install(t *testing.T, ns string, enabled bool, replicas int) {
	h.enabled = enabled
	helm.InstallContext(t, context.Background(), h.options(ns, replicas), filepath.Join(repoRoot, "charts", "epp"), "epp")
}

func (h *helmChannel) scale(t *testing.T, ns string, replicas int) {
	helm.UpgradeContext(t, context.Background(), h.options(ns, replicas), filepath.Join(repoRoot, "charts", "epp"), "epp")
}

func (h *helmChannel) uninstall(t *testing.T, ns string) {
	helm.DeleteContext(t, context.Background(), h.options(ns, 0), "epp", true)
}

// kustomizeChannel: `kubectl apply -n <ns> -k kustomize/overlays/<overlay>`; scaling
// is `kubectl scale`, as a kustomize user would do it.
type kustomizeChannel struct{ dir string }

func (*kustomizeChannel) name() string           { return "kustomize" }
func (*kustomizeChannel) createsNamespace() bool { return false }

func (k *kustomizeChannel) install(t *testing.T, ns string, enabled bool, replicas int) {
	overlay := "default"
	if enabled {
		overlay = "peer-discovery"
	}
	k.dir = filepath.Join(repoRoot, "kustomize", "overlays", overlay)
	k8s.KubectlApplyFromKustomizeContext(t, context.Background(), kubectlOptions(ns), k.dir)
	if replicas != 3 {
		k.scale(t, ns, replicas)
	}
}

func (k *kustomizeChannel) scale(t *testing.T, ns string, replicas int) {
	k8s.RunKubectlContext(t, context.Background(), kubectlOptions(ns), "scale", "deployment/epp", fmt.Sprintf("--replicas=%d", replicas))
}

func (k *kustomizeChannel) uninstall(t *testing.T, ns string) {
	k8s.KubectlDeleteFromKustomizeContext(t, context.Background(), kubectlOptions(ns), k.dir)
}

// terraformChannel: terraform/examples/basic with peer_discovery_enabled.
type terraformChannel struct{ opts *terraform.Options }

func (*terraformChannel) name() string           { return "terraform" }
func (*terraformChannel) createsNamespace() bool { return true }

func (tc *terraformChannel) install(t *testing.T, ns string, enabled bool, replicas int) {
	dir := filepath.Join(tfenv.CopyModule(t), "terraform", "examples", "basic")
	vars := map[string]any{
		"kubeconfig":             kubeconfig,
		"namespace":              ns,
		"create_namespace":       true,
		"peer_discovery_enabled": enabled,
		"replicas":               replicas,
		"wait":                   true,
	}
	if kubeContext != "" {
		vars["kube_context"] = kubeContext
	}
	tc.opts = tfenv.Options(t, dir, vars)
	terraform.InitAndApplyContext(t, context.Background(), tc.opts)
}

func (tc *terraformChannel) scale(t *testing.T, _ string, replicas int) {
	tc.opts.Vars["replicas"] = replicas
	terraform.ApplyContext(t, context.Background(), tc.opts)
}

func (tc *terraformChannel) uninstall(t *testing.T, _ string) {
	terraform.DestroyContext(t, context.Background(), tc.opts)
}
