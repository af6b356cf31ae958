//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gruntwork-io/terratest/modules/helm"
	"github.com/gruntwork-io/terratest/modules/k8s"
	"github.com/gruntwork-io/terratest/modules/terraform"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/tfenv"
)

// mode is how a case deploys peer discovery.
type mode string

const (
	off     mode = "off"     // llm-d-router's EPP, peer discovery off
	on      mode = "on"      // llm-d-router's EPP with the peer-discovery plugin
	sidecar mode = "sidecar" // epp runs as a sidecar; the EPP container is a stand-in consumer
)

// eppImage is the epp binary's image (the sidecar, the stand-in consumer, the helm
// test), llmdImage llm-d-router's EPP with the plugin.
const (
	eppRepository  = "epp-peer-discovery/epp"
	llmdRepository = "epp-peer-discovery/llm-d-router-epp"
)

// consumerArgs are the stand-in EPP's in sidecar mode: epp itself, reading the
// sidecar's peers file, which is what a file-based EPP does.
var consumerArgs = []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:8081",
	"--enable-peer-discovery", "--epp-peer-file=$(EPP_PEERS_FILE)"}

// channel deploys the EPP with one tool.
type channel interface {
	name() string
	// createsNamespace: the channel creates (and deletes) the namespace itself.
	createsNamespace() bool
	// restricted: its pods pass the restricted pod security level.
	restricted() bool
	modes() []mode
	workload() workload
	install(t *testing.T, ns string, m mode, replicas int)
	scale(t *testing.T, ns string, replicas int)
	uninstall(t *testing.T, ns string)
}

// workload is what a channel deploys: the Deployment, its pods' selector, and
// whether its peers are every live pod (membership alive) or the ready ones.
type workload struct {
	deployment, selector, serviceAccount string
	alive                                bool
}

// ours is what the project's channels share: names from the defaults (release
// "epp", Deployment, Service and ServiceAccount "epp"), every mode, restricted pods.
type ours struct{}

func (ours) restricted() bool { return true }
func (ours) modes() []mode    { return []mode{on, off, sidecar} }
func (ours) workload() workload {
	return workload{deployment: "epp", selector: "app.kubernetes.io/name=epp", serviceAccount: "epp"}
}

func channels() []channel {
	return []channel{&helmChannel{}, &kustomizeChannel{}, &terraformChannel{}, &upstreamChannel{}, &upstreamHelm4Channel{}}
}

func kubectlOptions(ns string) *k8s.KubectlOptions {
	return k8s.NewKubectlOptions(kubeContext, kubeconfig, ns)
}

// helmChannel: `helm install epp charts/epp --set router.epp.peerDiscovery.enabled=...`
// (sidecar mode: a values file with the mode and the stand-in EPP's args).
type helmChannel struct {
	ours
	mode   mode
	values string // values file in sidecar mode
}

func (*helmChannel) name() string           { return "helm" }
func (*helmChannel) createsNamespace() bool { return false }

func (h *helmChannel) options(ns string, replicas int) *helm.Options {
	o := &helm.Options{
		KubectlOptions: kubectlOptions(ns),
		SetValues: map[string]string{
			"router.epp.peerDiscovery.enabled": strconv.FormatBool(h.mode != off),
			"router.epp.replicas":              strconv.Itoa(replicas),
		},
		ExtraArgs: map[string][]string{
			"install": {"--wait", "--timeout", "3m"},
			"upgrade": {"--wait", "--timeout", "3m"},
		},
	}
	if h.values != "" {
		o.ValuesFiles = []string{h.values}
	}
	return o
}

func (h *helmChannel) install(t *testing.T, ns string, m mode, replicas int) {
	h.mode = m
	if m == sidecar {
		h.values = filepath.Join(t.TempDir(), "sidecar-values.yaml")
		args, _ := json.Marshal(consumerArgs)
		if err := os.WriteFile(h.values, []byte("router:\n  epp:\n    image: {repository: "+eppRepository+"}\n    peerDiscovery: {mode: sidecar}\n    args: "+string(args)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	helm.InstallContext(t, context.Background(), h.options(ns, replicas), filepath.Join(repoRoot, "charts", "epp"), "epp")
}

// test runs `helm test epp`: the chart's hook checks every replica from inside the
// cluster. On failure the output ends with the test pod's log (a passed test pod is
// deleted by its hook policy, so there is none to show then).
func (h *helmChannel) test(t *testing.T, ns string) (string, error) {
	out, err := helm.RunHelmCommandAndGetOutputContextE(t, context.Background(), h.options(ns, 0), "test", "epp", "--timeout", "2m")
	if err != nil {
		logs, _ := k8s.RunKubectlAndGetOutputContextE(t, context.Background(), kubectlOptions(ns), "logs", "epp-test-peers")
		out += "\n--- epp-test-peers log:\n" + logs
	}
	return out, err
}

func (h *helmChannel) scale(t *testing.T, ns string, replicas int) {
	helm.UpgradeContext(t, context.Background(), h.options(ns, replicas), filepath.Join(repoRoot, "charts", "epp"), "epp")
}

func (h *helmChannel) uninstall(t *testing.T, ns string) {
	helm.DeleteContext(t, context.Background(), h.options(ns, 0), "epp", true)
}

// kustomizeChannel: `kubectl apply -n <ns> -k kustomize/overlays/<overlay>`; scaling
// is `kubectl scale`, as a kustomize user would do it.
type kustomizeChannel struct {
	ours
	dir string
}

func (*kustomizeChannel) name() string           { return "kustomize" }
func (*kustomizeChannel) createsNamespace() bool { return false }

func (k *kustomizeChannel) install(t *testing.T, ns string, m mode, replicas int) {
	overlay := map[mode]string{off: "default", on: "peer-discovery", sidecar: "sidecar"}[m]
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

// terraformChannel: terraform/examples/basic with peer_discovery_enabled (and, in
// sidecar mode, peer_discovery_mode and the stand-in EPP's epp_args).
type terraformChannel struct {
	ours
	opts *terraform.Options
}

func (*terraformChannel) name() string           { return "terraform" }
func (*terraformChannel) createsNamespace() bool { return true }

func (tc *terraformChannel) install(t *testing.T, ns string, m mode, replicas int) {
	dir := filepath.Join(tfenv.CopyModule(t), "terraform", "examples", "basic")
	vars := map[string]any{
		"kubeconfig":             kubeconfig,
		"namespace":              ns,
		"create_namespace":       true,
		"peer_discovery_enabled": m != off,
		"replicas":               replicas,
		"wait":                   true,
	}
	if m == sidecar {
		vars["peer_discovery_mode"] = "sidecar"
		vars["image_repository"] = eppRepository
		vars["epp_args"] = consumerArgs
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

// upstreamChannel: an llm-d user's release of llm-d-router's own chart
// (llm-d-router-standalone, from the pinned upstream tree) with `epp post-render` as
// Helm's post-renderer: `helm install llmd <chart> --post-renderer bin/epp
// --post-renderer-args post-render --post-renderer-args --image=<EPP with the plugin>`.
// Upstream's defaults stay, leader election included (so membership is alive, and
// on kind one replica is ready). Its pods set no security contexts, so the
// namespace does not enforce the restricted level; upstream's CPU request (8) is
// lowered to fit kind's nodes and its image pull policy (Always) to IfNotPresent.
type upstreamChannel struct{ chart string }

const upstreamRelease = "llmd"

func (*upstreamChannel) name() string           { return "upstream-chart" }
func (*upstreamChannel) createsNamespace() bool { return false }
func (*upstreamChannel) restricted() bool       { return false }
func (*upstreamChannel) modes() []mode          { return []mode{on} }
func (*upstreamChannel) workload() workload {
	return workload{deployment: upstreamRelease + "-epp", selector: "llm-d-router-standalone=" + upstreamRelease + "-epp",
		serviceAccount: upstreamRelease + "-epp", alive: true}
}

// upstreamImage is llm-d-router's EPP with the plugin, at the chart's appVersion: the
// post-renderer's --image.
func upstreamImage(t *testing.T) string {
	version, err := render.ChartAppVersion()
	if err != nil {
		t.Fatal(err)
	}
	return llmdRepository + ":" + version
}

func (u *upstreamChannel) options(t *testing.T, ns string, replicas int) *helm.Options {
	postRender := []string{"--post-renderer", eppBin, "--post-renderer-args", "post-render",
		"--post-renderer-args", "--image=" + upstreamImage(t)}
	return &helm.Options{
		KubectlOptions: kubectlOptions(ns),
		SetValues: map[string]string{
			"router.inferencePool.create":          "false",
			"router.modelServers.matchLabels.app":  "vllm",
			"router.proxy.enabled":                 "false",
			"router.epp.replicas":                  strconv.Itoa(replicas),
			"router.epp.image.pullPolicy":          "IfNotPresent",
			"router.epp.resources.requests.cpu":    "10m",
			"router.epp.resources.requests.memory": "64Mi",
		},
		// No --wait: with leader election only the leader is ever ready.
		ExtraArgs: map[string][]string{"install": postRender, "upgrade": postRender},
	}
}

func (u *upstreamChannel) install(t *testing.T, ns string, _ mode, replicas int) {
	chart, err := render.UpstreamChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u.chart = chart
	helm.InstallContext(t, context.Background(), u.options(t, ns, replicas), u.chart, upstreamRelease)
}

func (u *upstreamChannel) scale(t *testing.T, ns string, replicas int) {
	helm.UpgradeContext(t, context.Background(), u.options(t, ns, replicas), u.chart, upstreamRelease)
}

func (u *upstreamChannel) uninstall(t *testing.T, ns string) {
	helm.DeleteContext(t, context.Background(), u.options(t, ns, 0), upstreamRelease, true)
}

// upstreamHelm4Channel: the same release of llm-d-router's chart with Helm 4
// (bin/helm4), whose --post-renderer takes a plugin's name, not a path: the plugin
// epp-post-render (make helm-plugin), installed into a Helm home of the case's own
// (Helm 3 shares the suite's and need not read a Helm 4 plugin).
type upstreamHelm4Channel struct {
	upstreamChannel
	home string
}

func (*upstreamHelm4Channel) name() string { return "upstream-helm4" }

// helm runs bin/helm4 against the suite's cluster, failing the test with its output.
func (u *upstreamHelm4Channel) helm(t *testing.T, args ...string) {
	t.Helper()
	if kubeContext != "" {
		args = append(args, "--kube-context", kubeContext)
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(repoRoot, "bin", "helm4"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM_DATA_HOME="+filepath.Join(u.home, "data"),
		"HELM_CONFIG_HOME="+filepath.Join(u.home, "config"), "HELM_CACHE_HOME="+filepath.Join(u.home, "cache"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm4 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// args are upstreamChannel's values and Helm 4's post-renderer.
func (u *upstreamHelm4Channel) args(t *testing.T, ns string, replicas int) []string {
	args := []string{"-n", ns, "--post-renderer", "epp-post-render", "--post-renderer-args", "--image=" + upstreamImage(t)}
	for k, v := range u.options(t, ns, replicas).SetValues {
		args = append(args, "--set", k+"="+v)
	}
	return args
}

func (u *upstreamHelm4Channel) install(t *testing.T, ns string, _ mode, replicas int) {
	chart, err := render.UpstreamChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u.chart, u.home = chart, t.TempDir()
	u.helm(t, "plugin", "install", filepath.Join(repoRoot, "bin", "helm-plugin", "epp-post-render"))
	u.helm(t, append([]string{"install", upstreamRelease, u.chart}, u.args(t, ns, replicas)...)...)
}

func (u *upstreamHelm4Channel) scale(t *testing.T, ns string, replicas int) {
	u.helm(t, append([]string{"upgrade", upstreamRelease, u.chart}, u.args(t, ns, replicas)...)...)
}

func (u *upstreamHelm4Channel) uninstall(t *testing.T, ns string) {
	u.helm(t, "uninstall", upstreamRelease, "-n", ns, "--wait")
}
