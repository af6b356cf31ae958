package charts_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/accept"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// TestMetricsAuth: llm-d-router's EPP checks a token on /metrics by default, as
// upstream's chart leaves it (the chart used to force --metrics-endpoint-auth=false
// and refuse the flag naming values that do not set it), with what that needs: the
// EPP's ServiceAccount bound to system:auth-delegator, and, with a ServiceMonitor, a
// scrape token of a ServiceAccount that may GET /metrics and nothing else.
func TestMetricsAuth(t *testing.T) {
	r := renderChart(t, nil)
	if c := render.EPPContainerOf(t, podOf(t, r).Containers); !slices.Contains(c.Args, "--metrics-endpoint-auth=true") {
		t.Fatalf("default args %v: want metrics auth on", c.Args)
	}
	if crb := only[*rbacv1.ClusterRoleBinding](t, r); crb.RoleRef.Name != "system:auth-delegator" {
		t.Fatalf("ClusterRoleBinding %s -> %s", crb.Name, crb.RoleRef.Name)
	}

	off := renderChart(t, vals("router.monitoring.prometheus.auth.enabled", false))
	if c := render.EPPContainerOf(t, podOf(t, off).Containers); !slices.Contains(c.Args, "--metrics-endpoint-auth=false") {
		t.Fatalf("auth off: args %v", c.Args)
	}
	if n := count[*rbacv1.ClusterRoleBinding](off) + count[*rbacv1.ClusterRole](off); n != 0 {
		t.Fatalf("auth off: %d cluster-scoped RBAC objects", n)
	}
	// Sidecar mode: the EPP is the user's; the chart sets no flag of it and binds nothing.
	sc := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"))
	if n := count[*rbacv1.ClusterRoleBinding](sc); n != 0 {
		t.Fatalf("sidecar mode: %d ClusterRoleBindings", n)
	}

	// The flag is refused naming the value that sets it.
	_, _, err := render.Helm("epp", "team-a", vals("router.epp.flags", map[string]any{"metrics-endpoint-auth": false}))
	if err == nil || !strings.Contains(err.Error(), "router.epp.flags.metrics-endpoint-auth is set by the chart: use router.monitoring.prometheus.auth.enabled") {
		t.Fatalf("flags.metrics-endpoint-auth: %v", err)
	}

	// A ServiceMonitor scrapes with the reader's token, by either value.
	for name, values := range map[string]map[string]any{
		"router.epp.serviceMonitor": vals("router.epp.serviceMonitor.enabled", true, "router.epp.serviceMonitor.force", true),
		"router.monitoring.prometheus (upstream's)": vals("router.monitoring.prometheus.enabled", true, "router.monitoring.interval", "15s",
			"router.monitoring.prometheus.extraLabels", map[string]any{"release": "prom"}),
	} {
		r := renderChart(t, values)
		var sm *unstructured.Unstructured
		for _, o := range r.objs {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "ServiceMonitor" {
				sm = u
			}
		}
		if sm == nil {
			t.Fatalf("%s: no ServiceMonitor", name)
		}
		ep, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		secret, _, _ := unstructured.NestedString(ep[0].(map[string]any), "authorization", "credentials", "name")
		if secret != "epp-metrics-reader" {
			t.Fatalf("%s: ServiceMonitor endpoint %v: want the token of Secret epp-metrics-reader", name, ep[0])
		}
		var tok *corev1.Secret
		for _, o := range r.objs {
			if s, ok := o.(*corev1.Secret); ok && s.Name == secret {
				tok = s
			}
		}
		if tok == nil || tok.Type != corev1.SecretTypeServiceAccountToken || tok.Annotations["kubernetes.io/service-account.name"] != "epp-metrics-reader" {
			t.Fatalf("%s: token Secret %+v", name, tok)
		}
		role := only[*rbacv1.ClusterRole](t, r)
		if diff := cmp.Diff([]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, role.Rules); diff != "" {
			t.Fatalf("%s: reader ClusterRole (-want +got):\n%s", name, diff)
		}
		if strings.HasPrefix(name, "router.monitoring") {
			if iv, _, _ := unstructured.NestedString(ep[0].(map[string]any), "interval"); iv != "15s" || sm.GetLabels()["release"] != "prom" {
				t.Fatalf("%s: interval %q labels %v", name, iv, sm.GetLabels())
			}
		}
	}
}

// TestMetricsAuthRBACOnTheAPIServer: the rendered RBAC, created on a real API server,
// lets the EPP's ServiceAccount create TokenReviews and SubjectAccessReviews (what its
// metrics auth does), and the reader's GET /metrics and nothing else.
func TestMetricsAuthRBACOnTheAPIServer(t *testing.T) {
	ns := accept.RestrictedNamespace(t, env, "metrics-auth")
	objs, err := render.HelmObjects("epp", ns, vals("router.epp.serviceMonitor.enabled", true, "router.epp.serviceMonitor.force", true))
	if err != nil {
		t.Fatal(err)
	}
	c, w := accept.Client(t, env)
	var kept []client.Object
	for _, o := range objs {
		if _, crd := o.(*unstructured.Unstructured); !crd { // no ServiceMonitor CRD on this API server
			kept = append(kept, o)
		}
	}
	accept.Restricted(t, c, w, kept)
	for _, r := range []string{"tokenreviews", "subjectaccessreviews"} {
		group := map[string]string{"tokenreviews": "authentication.k8s.io", "subjectaccessreviews": "authorization.k8s.io"}[r]
		if !accept.Can(t, env, ns, "epp", "create", group, r, "") {
			t.Errorf("the EPP's ServiceAccount cannot create %s", r)
		}
		if accept.Can(t, env, ns, "epp-metrics-reader", "create", group, r, "") {
			t.Errorf("the metrics reader can create %s", r)
		}
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	getMetrics := func(sa string) bool {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	if !getMetrics("epp-metrics-reader") {
		t.Error("the metrics reader may not GET /metrics")
	}
	if accept.Can(t, env, ns, "epp-metrics-reader", "list", "", "pods", ns) {
		t.Error("the metrics reader can list pods")
	}
}

// upstreamValuesFile is a user's values file of llm-d-router-standalone, with every
// value this chart can honor (the names upstream uses), set as upstream's values
// file sets them.
const upstreamValuesFile = `
router:
  modelServers:
    type: vllm
    protocol: http
    # null drops this chart's default label (app.kubernetes.io/component:
    # model-server), which Helm merges with the file's (the README's table says so).
    matchLabels: {app: vllm, app.kubernetes.io/component: null}
    targetPorts: [{number: 8000}]
  inferencePool: {create: false, failureMode: FailOpen}
  inferenceObjectives: []
  proxy: {enabled: false, mode: sidecar}
  tokenizer: {enabled: false}
  latencyPredictor: {enabled: false}
  tracing: {enabled: false}
  monitoring:
    interval: 10s
    provider: {name: prometheusoperator}
    prometheus: {enabled: false, auth: {enabled: false, secretName: inference-gateway-sa-metrics-reader-secret}, extraLabels: {}}
  extraServicePorts: [{name: http, port: 8081, protocol: TCP, targetPort: 8081}]
  epp:
    replicas: 3
    image: {registry: example.com, repository: team/llm-d-router-epp, tag: "1.0", pullPolicy: IfNotPresent}
    extProcPort: 9100
    grpcHealthPort: 9200
    parsers: []
    metricsDataSource: {scheme: http, path: /metrics, insecureSkipVerify: true}
    flags: {v: 2}
    env: [{name: MODE, value: fast}]
    volumes: [{name: cache, emptyDir: {}}]
    volumeMounts: [{name: cache, mountPath: /cache}]
`

// TestUpstreamValuesFile: a values file of llm-d-router's chart installs this chart
// (its schema used to refuse extProcPort, create, proxy, ...) and means the same:
// the ports, volumes, tracing and metrics auth as set there. What this chart cannot
// do is refused, naming the value and the README's table of both charts.
func TestUpstreamValuesFile(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(upstreamValuesFile), &values); err != nil {
		t.Fatal(err)
	}
	r := renderChart(t, values)
	pod := podOf(t, r)
	c := render.EPPContainerOf(t, pod.Containers)
	for _, want := range []string{"--grpc-port=9100", "--grpc-health-port=9200", "--metrics-endpoint-auth=false", "--tracing=false", "--v=2", "--endpoint-selector=app=vllm"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if got := portsOf(c); got["grpc-ext-proc"] != 9100 || got["grpc-health"] != 9200 {
		t.Errorf("container ports %v", got)
	}
	if p := c.ReadinessProbe; p == nil || p.GRPC == nil || p.GRPC.Port != 9200 {
		t.Errorf("readiness probe %+v: want the gRPC health port 9200", p)
	}
	if c.Image != "example.com/team/llm-d-router-epp:1.0" {
		t.Errorf("image %s", c.Image)
	}
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "cache" }) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "cache" && m.MountPath == "/cache" }) {
		t.Errorf("volumes %v, mounts %v: want upstream's volumes and volumeMounts", pod.Volumes, c.VolumeMounts)
	}
	svc := only[*corev1.Service](t, r)
	if got := servicePorts(svc); got["grpc-ext-proc"] != 9100 || got["http"] != 8081 {
		t.Errorf("Service ports %v", got)
	}

	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"a proxy", vals("router.proxy.enabled", true), "router.proxy.enabled=true: this chart deploys no proxy"},
		{"an InferencePool to create", vals("router.inferencePool.create", true), "router.inferencePool.create=true: this chart creates no InferencePool"},
		{"a tokenizer", vals("router.tokenizer.enabled", true), "router.tokenizer.enabled=true"},
		{"another model server type", vals("router.modelServers.type", "sglang"), "router.modelServers.type=sglang"},
		{"parsers", vals("router.epp.parsers", []any{"openai-parser"}), "router.epp.parsers"},
		{"GMP", vals("router.monitoring.provider.name", "gmp"), "router.monitoring.provider.name=gmp"},
		{"InferenceObjectives", vals("router.inferenceObjectives", []any{map[string]any{"name": "a", "priority": 1}}), "router.inferenceObjectives"},
	} {
		_, _, err := render.Helm("epp", "team-a", tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "charts/epp/README.md") {
			t.Errorf("%s: %v, want a refusal naming %q and the README's table", tc.name, err, tc.want)
		}
	}
	_, _, err := render.Helm("epp", "team-a", vals("router.epp.extProcPort", 9100, "router.epp.ports.extProc", 9200))
	if err == nil || !strings.Contains(err.Error(), "router.epp.extProcPort=9100 and router.epp.ports.extProc=9200") {
		t.Errorf("both names of the ext-proc port, differently: %v", err)
	}
	// Unknown keys stay refused.
	if _, _, err := render.Helm("epp", "team-a", vals("router.epp.extProcPortt", 9100)); err == nil {
		t.Error("a typo of extProcPort accepted")
	}
}
