package charts_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peercheck"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// helmCLI is a real helm binary with a home of its own (plugins, cache, config) in a
// test folder, talking to the suite's API server.
type helmCLI struct {
	bin  string
	home string
}

// newHelm returns the helm binary named by env (make sets HELM3_BIN and HELM4_BIN).
func newHelm(t *testing.T, env string) helmCLI {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		t.Fatalf("%s is not set: run the tests through make (make test-manifests builds bin/helm and bin/helm4)", env)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", env, bin, err)
	}
	return helmCLI{bin: bin, home: t.TempDir()}
}

// run runs helm with args; it returns stdout and stderr together, and the error.
func (h helmCLI) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), h.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig,
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"), "HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// upstreamArgs are a user's values of llm-d-router-standalone (upstreamValues).
var upstreamArgs = []string{"--set", "router.inferencePool.create=false", "--set", "router.modelServers.matchLabels.app=vllm",
	"--set", "router.proxy.enabled=false", "--set", "router.epp.replicas=3"}

// TestUpstreamChartRouteWithHelm3AndHelm4: the post-renderer route with the real helm
// binaries. Helm 3 runs `epp post-render` by path; Helm 4 takes only plugins for
// --post-renderer ("plugin ... not found" for a path), so it runs the plugin
// epp-post-render (make helm-plugin), installed with `helm plugin install`, which also
// adds a `helm test` hook. Both install upstream's chart on the API server with peer
// discovery; a refused rendering shows the post-renderer's own message with either
// (Helm 4 drops a plugin's stderr; epp writes to helm's).
func TestUpstreamChartRouteWithHelm3AndHelm4(t *testing.T) {
	chart, err := render.UpstreamChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eppBin := os.Getenv("EPP_BIN")
	plugin := os.Getenv("HELM_PLUGIN_DIR")
	if eppBin == "" || plugin == "" {
		t.Fatal("EPP_BIN or HELM_PLUGIN_DIR is not set: run the tests through make (make test-manifests builds bin/epp and the plugin)")
	}
	h4 := newHelm(t, "HELM4_BIN")
	if out, err := h4.run(t, "plugin", "install", plugin); err != nil {
		t.Fatalf("helm 4 plugin install %s: %v\n%s", plugin, err, out)
	}
	for _, tc := range []struct {
		name       string
		helm       helmCLI
		postRender []string
		hook       bool
	}{
		{"helm3", newHelm(t, "HELM3_BIN"), []string{"--post-renderer", eppBin, "--post-renderer-args", "post-render"}, false},
		{"helm4", h4, []string{"--post-renderer", "epp-post-render"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := env.CreateNamespace(context.Background(), "route-"+tc.name, nil)
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"install", "llmd", chart, "-n", ns}, upstreamArgs...)
			out, err := tc.helm.run(t, append(append(args, tc.postRender...), "--post-renderer-args", "--image="+llmdImage)...)
			if err != nil {
				t.Fatalf("helm install with the post-renderer: %v\n%s", err, out)
			}
			c, _ := client.New(env.Config, client.Options{})
			var dep appsv1.Deployment
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llmd-epp"}, &dep); err != nil {
				t.Fatal(err)
			}
			ct := dep.Spec.Template.Spec.Containers[0]
			for _, x := range dep.Spec.Template.Spec.Containers {
				if x.Name == "epp" {
					ct = x
				}
			}
			if ct.Image != llmdImage || !slicesHaveEnvName(ct.Env, "EPP_PEER_SERVICE") {
				t.Fatalf("installed EPP runs %s with env %v: want %s with the plugin's env", ct.Image, ct.Env, llmdImage)
			}
			var role rbacv1.Role
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llmd-epp-peer-discovery"}, &role); err != nil {
				t.Fatalf("the peer-discovery Role: %v", err)
			}
			// The test hook is a hook (not created at install), with Helm 4 only.
			var pod corev1.Pod
			err = c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llmd-epp-test-peers"}, &pod)
			if !apierrors.IsNotFound(err) {
				t.Fatalf("the test Pod exists after install (%v): a hook must not be created with the release", err)
			}
			hooks, err := tc.helm.run(t, "get", "hooks", "llmd", "-n", ns)
			if err != nil {
				t.Fatalf("helm get hooks: %v\n%s", err, hooks)
			}
			if got := strings.Contains(hooks, "check-peers"); got != tc.hook {
				t.Fatalf("release hooks include epp check-peers: %v, want %v:\n%s", got, tc.hook, hooks)
			}

			// A later upgrade without the post-renderer (Helm keeps no record of it)
			// renders upstream's chart alone: peer discovery, the image and the test
			// hook go. epp check-peers, run against the Service, says so and why.
			if out, err := tc.helm.run(t, "upgrade", "llmd", chart, "-n", ns, "--reuse-values"); err != nil {
				t.Fatalf("helm upgrade --reuse-values: %v\n%s", err, out)
			}
			var svc corev1.Service
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "llmd-epp"}, &svc); err != nil {
				t.Fatal(err)
			}
			checkPeersAfterTheUpgrade(t, c, &svc)
			if hooks, _ := tc.helm.run(t, "get", "hooks", "llmd", "-n", ns); strings.Contains(hooks, "check-peers") {
				t.Fatalf("the test hook outlived an upgrade without the post-renderer:\n%s", hooks)
			}
			out, err = tc.helm.run(t, "test", "llmd", "-n", ns, "--timeout", "20s")
			if err != nil || strings.Contains(out, "test-peers") {
				t.Fatalf("helm test after the upgrade: %v, want it to run no test:\n%s", err, out)
			}
			t.Logf("helm test after an upgrade without the post-renderer:\n%s", out)

			// Without --image (upstream's own image has no plugin) the post-renderer
			// refuses, and its reason reaches the user.
			out, err = tc.helm.run(t, append(append([]string{"template", "llmd", chart, "-n", ns}, upstreamArgs...), tc.postRender...)...)
			if err == nil || !strings.Contains(out, "pass --image=") {
				t.Fatalf("helm template without --image: %v, want the post-renderer's reason (pass --image=):\n%s", err, out)
			}
		})
	}
	// A path is not a post-renderer for Helm 4: what failed before the plugin.
	out, err := h4.run(t, append(append([]string{"template", "llmd", chart}, upstreamArgs...), "--post-renderer", eppBin)...)
	if err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("helm 4 with --post-renderer %s: %v\n%s", eppBin, err, out)
	}
}

// checkPeersAfterTheUpgrade lists svc's endpoints as the EndpointSlice controller
// would (its ports, one ready pod; the API server here runs no controllers) and runs
// epp check-peers against it: it must fail naming the missing peer port and the
// upgrade without the post-renderer.
func checkPeersAfterTheUpgrade(t *testing.T, c client.Client, svc *corev1.Service) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc.Name + "-x", Namespace: svc.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ref(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: svc.Name + "-0", Namespace: svc.Namespace}}},
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ref(p.Name), Port: ref(p.Port), Protocol: ref(p.Protocol)})
	}
	if err := c.Create(context.Background(), slice); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	noDial := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("test: no replica may be dialled (the pod IPs are not real)")
	}}}
	flags, err := peercheck.Flags([]string{"--service=" + svc.Name, "--namespace=" + svc.Namespace, "--port-name=http-peers", "--membership=alive", "--timeout=1s"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = peercheck.Run(context.Background(), cs, noDial, flags, &out)
	if err == nil || !strings.Contains(err.Error(), "peer discovery is not deployed") || !strings.Contains(err.Error(), "without the post-renderer") {
		t.Fatalf("epp check-peers after an upgrade without the post-renderer: %v, want it to say peer discovery is gone and why\n%s", err, out.String())
	}
}

func slicesHaveEnvName(list []corev1.EnvVar, name string) bool {
	for _, e := range list {
		if e.Name == name {
			return true
		}
	}
	return false
}

func ref[T any](v T) *T { return &v }
