package charts_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	helmpostrender "helm.sh/helm/v3/pkg/postrender"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/accept"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// upstreamValues are values a user of llm-d-router's chart sets: its model servers
// by label, no InferencePool, no proxy, three EPP replicas (with upstream's default
// leader election).
var upstreamValues = vals("router.inferencePool.create", false, "router.modelServers.matchLabels", map[string]any{"app": "vllm"},
	"router.proxy.enabled", false, "router.epp.replicas", 3)

const llmdImage = "epp-peer-discovery/llm-d-router-epp:test"

// renderUpstream renders llm-d-router-standalone from the pinned upstream tree,
// through `epp post-render` (bin/epp, as helm runs it) when args are given.
func renderUpstream(t *testing.T, ns string, args ...string) map[string]client.Object {
	t.Helper()
	chart, err := render.UpstreamChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var o render.HelmOptions
	o.Chart = chart
	if args != nil {
		bin := os.Getenv("EPP_BIN")
		if bin == "" {
			t.Fatal("EPP_BIN is not set: run the tests through make (make test-manifests builds bin/epp)")
		}
		if o.PostRenderer, err = helmpostrender.NewExec(bin, append([]string{"post-render"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	r, err := render.HelmRender("rel", ns, upstreamValues, o)
	if err != nil {
		t.Fatalf("helm template llm-d-router-standalone: %v", err)
	}
	objs, err := render.Decode([]byte(r.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]client.Object{}
	for _, o := range objs {
		out[render.Key(o)] = o
	}
	return out
}

func upstreamEPP(t *testing.T, objs map[string]client.Object) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			for i, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "epp" {
					return d, &d.Spec.Template.Spec.Containers[i]
				}
			}
		}
	}
	t.Fatal("no Deployment with the container epp")
	return nil, nil
}

// TestUpstreamChartThroughThePostRenderer is the route for an existing llm-d-router
// release: upstream's chart, rendered from the shared tree, through `epp
// post-render`, gains peer discovery and keeps its EPP, and the result is accepted
// by a real API server with the RBAC the plugin needs and no more.
func TestUpstreamChartThroughThePostRenderer(t *testing.T) {
	c, _ := accept.Client(t, env)
	ns, err := env.CreateNamespace(context.Background(), "upstream-chart", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := renderUpstream(t, ns)
	after := renderUpstream(t, ns, "--image="+llmdImage)

	// Every object upstream renders is still there.
	for k := range before {
		if after[k] == nil {
			t.Errorf("%s is gone", k)
		}
	}
	dep0, c0 := upstreamEPP(t, before)
	dep, c1 := upstreamEPP(t, after)

	// The EPP container keeps every arg, env, probe, volume mount and the token of
	// upstream's chart; it runs the image with the plugin.
	if !reflect.DeepEqual(c1.Args, c0.Args) {
		t.Errorf("args changed:\n%v\nwas\n%v", c1.Args, c0.Args)
	}
	if !slicesHave(c1.Args, "--ha-enable-leader-election", "--config-file", "--grpc-health-port") {
		t.Errorf("upstream's args are not all there: %v", c1.Args)
	}
	for _, e := range c0.Env {
		if !slicesHaveEnv(c1.Env, e) {
			t.Errorf("env %s changed or gone", e.Name)
		}
	}
	for _, p := range []struct{ a, b any }{
		{c1.LivenessProbe, c0.LivenessProbe}, {c1.ReadinessProbe, c0.ReadinessProbe}, {c1.VolumeMounts, c0.VolumeMounts},
		{dep.Spec.Template.Spec.Volumes, dep0.Spec.Template.Spec.Volumes},
		{dep.Spec.Template.Spec.AutomountServiceAccountToken, dep0.Spec.Template.Spec.AutomountServiceAccountToken},
		{dep.Spec.Template.Spec.ServiceAccountName, dep0.Spec.Template.Spec.ServiceAccountName},
		{dep.Spec.Strategy, dep0.Spec.Strategy}, {dep.Spec.Replicas, dep0.Spec.Replicas},
	} {
		if !reflect.DeepEqual(p.a, p.b) {
			t.Errorf("changed: %+v, was %+v", p.a, p.b)
		}
	}
	if c1.Image != llmdImage {
		t.Errorf("image = %s, want %s", c1.Image, llmdImage)
	}
	got := map[string]string{}
	for _, e := range c1.Env {
		got[e.Name] = e.Value
	}
	if got["EPP_PEER_SERVICE"] != "rel-epp" || got["EPP_PEER_MEMBERSHIP"] != "alive" {
		t.Errorf("plugin env = %v, want EPP_PEER_SERVICE=rel-epp and, with upstream's leader election, EPP_PEER_MEMBERSHIP=alive", got)
	}

	// The configuration the EPP reads (its --config-file) names the plugin, and
	// llm-d-router's own config loader would find it: pluginRef to a declared plugin.
	cm := after["ConfigMap/"+ns+"/rel-epp"].(*corev1.ConfigMap)
	var cfg struct {
		Plugins []struct {
			Name, Type string
		}
		DataLayer struct {
			PeerDiscovery struct{ PluginRef string } `json:"peerDiscovery"`
		} `json:"dataLayer"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["default-plugins.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	declared := false
	for _, p := range cfg.Plugins {
		declared = declared || p.Name == cfg.DataLayer.PeerDiscovery.PluginRef && p.Type == "endpointslice-peer-discovery"
	}
	if !declared {
		t.Errorf("default-plugins.yaml: pluginRef %q to no endpointslice-peer-discovery plugin:\n%s", cfg.DataLayer.PeerDiscovery.PluginRef, cm.Data["default-plugins.yaml"])
	}

	// The Service carries the peer port, by name, for the EndpointSlices.
	svc := after["Service/"+ns+"/rel-epp"].(*corev1.Service)
	found := false
	for _, p := range svc.Spec.Ports {
		found = found || p.Name == "peer-sync" && p.TargetPort.StrVal == "peer-sync"
	}
	if !found {
		t.Errorf("Service rel-epp has no port peer-sync: %v", svc.Spec.Ports)
	}
	if _, ok := after["Role/"+ns+"/rel-epp-peer-discovery"].(*rbacv1.Role); !ok {
		t.Fatal("no Role rel-epp-peer-discovery")
	}

	// A real API server takes all of it, strictly validated.
	var objs []client.Object
	for _, o := range after {
		objs = append(objs, o)
	}
	render.SortObjects(objs)
	accept.Create(t, c, objs)
	elsewhere, err := env.CreateNamespace(context.Background(), "upstream-elsewhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"get", "list", "watch"} {
		if !accept.Can(t, env, ns, "rel-epp", verb, "discovery.k8s.io", "endpointslices", ns) {
			t.Errorf("the EPP's ServiceAccount cannot %s endpointslices in its namespace", verb)
		}
		if accept.Can(t, env, ns, "rel-epp", verb, "discovery.k8s.io", "endpointslices", elsewhere) {
			t.Errorf("the EPP's ServiceAccount can %s endpointslices in another namespace", verb)
		}
	}
	if accept.Can(t, env, ns, "rel-epp", "create", "discovery.k8s.io", "endpointslices", ns) {
		t.Error("the EPP's ServiceAccount can create endpointslices")
	}
}

// TestUpstreamChartWithItsOwnImageIsRefused: upstream's image has no plugin; the
// post-renderer says so rather than rendering an EPP that exits on its config.
func TestUpstreamChartWithItsOwnImageIsRefused(t *testing.T) {
	chart, err := render.UpstreamChart(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("EPP_BIN")
	if bin == "" {
		t.Fatal("EPP_BIN is not set: run the tests through make (make test-manifests builds bin/epp)")
	}
	pr, err := helmpostrender.NewExec(bin, "post-render")
	if err != nil {
		t.Fatal(err)
	}
	_, err = render.HelmRender("rel", "ns", upstreamValues, render.HelmOptions{Chart: chart, PostRenderer: pr})
	if err == nil || !strings.Contains(err.Error(), "--image=") {
		t.Fatalf("err = %v, want the post-renderer to ask for --image", err)
	}
}

func slicesHave(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			found = found || l == w
		}
		if !found {
			return false
		}
	}
	return true
}

func slicesHaveEnv(list []corev1.EnvVar, e corev1.EnvVar) bool {
	for _, have := range list {
		if reflect.DeepEqual(have, e) {
			return true
		}
	}
	return false
}
