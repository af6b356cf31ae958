package charts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

func podOf(t *testing.T, r rendered) corev1.PodSpec {
	t.Helper()
	return only[*appsv1.Deployment](t, r).Spec.Template.Spec
}

// hooks renders the chart's hook manifests (the helm test pod).
func hooks(t *testing.T, values map[string]any) []*corev1.Pod {
	t.Helper()
	r, err := render.HelmWith("epp", "team-a", values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Decode([]byte(r.Hooks))
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok {
			t.Fatalf("hook %s is not a Pod", render.Key(o))
		}
		pods = append(pods, p)
	}
	return pods
}

func TestNameOverrides(t *testing.T) {
	r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.nameOverride", "gateway"))
	dep := only[*appsv1.Deployment](t, r)
	if dep.Name != "epp-gateway" || dep.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "gateway" {
		t.Fatalf("nameOverride gateway: Deployment %s, selector %v", dep.Name, dep.Spec.Selector.MatchLabels)
	}
	if env := dep.Spec.Template.Spec.Containers[0].Env[0]; env.Name != "EPP_PEER_SERVICE" || env.Value != "epp-gateway" {
		t.Fatalf("env %v: EPP_PEER_SERVICE must name the renamed Service", env)
	}

	r = renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.fullnameOverride", "router"))
	for _, o := range r.objs {
		if !strings.HasPrefix(o.GetName(), "router") {
			t.Errorf("fullnameOverride router: %s", render.Key(o))
		}
	}
	if rb := peerRoleBinding(t, r); rb.Name != "router-peer-discovery" || rb.Subjects[0].Name != "router" {
		t.Fatalf("RoleBinding %s binds %v", rb.Name, rb.Subjects)
	}
}

func TestServiceAccountValues(t *testing.T) {
	r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.serviceAccount.name", "epp-runner",
		"router.epp.serviceAccount.annotations", map[string]any{"iam.example.com/role": "epp"}))
	sa := only[*corev1.ServiceAccount](t, r)
	if sa.Name != "epp-runner" || sa.Annotations["iam.example.com/role"] != "epp" {
		t.Fatalf("ServiceAccount %s %v", sa.Name, sa.Annotations)
	}
	if got := podOf(t, r).ServiceAccountName; got != "epp-runner" {
		t.Fatalf("serviceAccountName %q", got)
	}

	// Not created: the pods run as the named one, which the RoleBinding binds.
	r = renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.serviceAccount.create", false, "router.epp.serviceAccount.name", "shared"))
	if n := count[*corev1.ServiceAccount](r); n != 0 {
		t.Fatalf("%d ServiceAccounts rendered with create=false", n)
	}
	if got := podOf(t, r).ServiceAccountName; got != "shared" {
		t.Fatalf("serviceAccountName %q", got)
	}
	for _, o := range r.objs {
		if rb, ok := o.(*rbacv1.RoleBinding); ok && rb.Subjects[0].Name != "shared" {
			t.Fatalf("RoleBinding %s binds %v, want shared", rb.Name, rb.Subjects)
		}
	}
	r = renderChart(t, vals("router.epp.serviceAccount.create", false))
	if got := podOf(t, r).ServiceAccountName; got != "default" {
		t.Fatalf("create=false without a name: serviceAccountName %q, want default", got)
	}
}

func TestLabels(t *testing.T) {
	r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true,
		"router.epp.commonLabels", map[string]any{"team": "inference"},
		"router.epp.podLabels", map[string]any{"sidecar.istio.io/inject": "false"}))
	want := map[string]string{
		"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": "epp", "app.kubernetes.io/version": appVersion(t),
		"app.kubernetes.io/component": "epp", "app.kubernetes.io/part-of": "epp", "app.kubernetes.io/managed-by": "Helm",
		"team": "inference",
	}
	for _, o := range r.objs {
		for k, v := range want {
			if o.GetLabels()[k] != v {
				t.Errorf("%s: label %s=%q, want %q", render.Key(o), k, o.GetLabels()[k], v)
			}
		}
		if _, ok := o.GetLabels()["sidecar.istio.io/inject"]; ok {
			t.Errorf("%s carries a pod label", render.Key(o))
		}
	}
	dep := only[*appsv1.Deployment](t, r)
	pod := dep.Spec.Template.Labels
	for k, v := range want {
		if pod[k] != v {
			t.Errorf("pod label %s=%q, want %q", k, pod[k], v)
		}
	}
	if pod["sidecar.istio.io/inject"] != "false" {
		t.Errorf("pod labels %v lack podLabels", pod)
	}
	if diff := cmp.Diff(map[string]string{"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": "epp"}, dep.Spec.Selector.MatchLabels); diff != "" {
		t.Fatalf("selector changed (it is immutable) (-want +got):\n%s", diff)
	}
}

func TestImageTagDefaultsToAppVersion(t *testing.T) {
	if got := podOf(t, renderChart(t, nil)).Containers[0].Image; got != "epp-peer-discovery/llm-d-router-epp:"+appVersion(t) {
		t.Fatalf("image %s", got)
	}
	if got := podOf(t, renderChart(t, vals("router.epp.image.tag", "dev"))).Containers[0].Image; got != "epp-peer-discovery/llm-d-router-epp:dev" {
		t.Fatalf("image %s", got)
	}
	// As in llm-d-router's charts: a registry before the repository.
	if got := podOf(t, renderChart(t, vals("router.epp.image.registry", "ghcr.io/example/"))).Containers[0].Image; got != "ghcr.io/example/epp-peer-discovery/llm-d-router-epp:"+appVersion(t) {
		t.Fatalf("image with a registry %s", got)
	}
}

// peerRoleBinding is the RoleBinding of the peer-discovery Role.
func peerRoleBinding(t *testing.T, r rendered) *rbacv1.RoleBinding {
	t.Helper()
	for _, o := range r.objs {
		if rb, ok := o.(*rbacv1.RoleBinding); ok && strings.HasSuffix(rb.Name, "-peer-discovery") {
			return rb
		}
	}
	t.Fatalf("no peer-discovery RoleBinding among %v", r.keys())
	return nil
}

func TestExtraPodFields(t *testing.T) {
	r := renderChart(t, vals(
		"router.epp.extraVolumes", []any{map[string]any{"name": "cache", "emptyDir": map[string]any{}}},
		"router.epp.extraVolumeMounts", []any{map[string]any{"name": "cache", "mountPath": "/cache"}},
		"router.epp.extraContainers", []any{map[string]any{"name": "proxy", "image": "example.com/proxy:1"}},
		"router.epp.initContainers", []any{map[string]any{"name": "setup", "image": "example.com/setup:1"}},
	))
	pod := podOf(t, r)
	if len(pod.Volumes) != 2 || pod.Volumes[0].Name != "config" || pod.Volumes[1].Name != "cache" {
		t.Fatalf("volumes %+v: want the EPP configuration, then the extra one", pod.Volumes)
	}
	if c := pod.Containers[0]; c.Name != "epp" || len(c.VolumeMounts) != 2 || c.VolumeMounts[1].MountPath != "/cache" {
		t.Fatalf("EPP container %+v", c)
	}
	if len(pod.Containers) != 2 || pod.Containers[1].Name != "proxy" || len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "setup" {
		t.Fatalf("containers %v, init containers %v", pod.Containers, pod.InitContainers)
	}
}

func TestServiceMonitor(t *testing.T) {
	const api = "monitoring.coreos.com/v1/ServiceMonitor"
	monitors := func(values map[string]any, apis ...string) []*unstructured.Unstructured {
		t.Helper()
		r, err := render.HelmWith("epp", "team-a", values, apis...)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := render.Decode([]byte(r.Manifest))
		if err != nil {
			t.Fatal(err)
		}
		var out []*unstructured.Unstructured
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "ServiceMonitor" {
				out = append(out, u)
			}
		}
		return out
	}
	ports := func(sm *unstructured.Unstructured) []string {
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		var out []string
		for _, e := range eps {
			out = append(out, e.(map[string]any)["port"].(string))
		}
		return out
	}
	if got := monitors(nil, api); len(got) != 0 {
		t.Fatal("a ServiceMonitor without serviceMonitor.enabled")
	}
	if got := monitors(vals("router.epp.serviceMonitor.enabled", true)); len(got) != 0 {
		t.Fatal("a ServiceMonitor where the cluster does not serve its API")
	}
	got := monitors(vals("router.epp.serviceMonitor.enabled", true, "router.epp.serviceMonitor.labels", map[string]any{"release": "prom"}), api)
	if len(got) != 1 || got[0].GetLabels()["release"] != "prom" || !slices.Equal(ports(got[0]), []string{"http-metrics"}) {
		t.Fatalf("ServiceMonitor with its API: %v", got)
	}
	if got := monitors(vals("router.epp.serviceMonitor.enabled", true, "router.epp.serviceMonitor.force", true)); len(got) != 1 {
		t.Fatal("no ServiceMonitor with force")
	}
	got = monitors(vals("router.epp.serviceMonitor.enabled", true, "router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"), api)
	if len(got) != 1 || !slices.Equal(ports(got[0]), []string{"http-metrics", "http-peers"}) {
		t.Fatalf("sidecar mode: ServiceMonitor endpoints %v, want the EPP's and the sidecar's metrics", ports(got[0]))
	}
}

// consumerArgs are what a file-based EPP runs with (here epp itself, reading the
// sidecar's file): the e2e suite's stand-in.
var consumerArgs = []any{"--enable-peer-discovery", "--epp-peer-file=$(EPP_PEERS_FILE)"}

func TestSidecarMode(t *testing.T) {
	r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar",
		"router.epp.peerDiscovery.membership", "alive",
		"router.epp.peerDiscovery.sidecar.flags", map[string]any{"zap-log-level": "debug"},
		"router.epp.image.repository", "example.com/my-epp", "router.epp.image.tag", "1.0",
		"router.epp.command", []any{"/my-epp"}, "router.epp.args", []any{"--config=/etc/epp.yaml"},
		"router.epp.env", []any{map[string]any{"name": "MODE", "value": "fast"}}))
	pod := podOf(t, r)
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Fatal("the pod automounts the ServiceAccount token: only the sidecar may have it")
	}
	epp := render.EPPContainerOf(t, pod.Containers)
	if epp.Image != "example.com/my-epp:1.0" || !slices.Equal(epp.Command, []string{"/my-epp"}) || !slices.Equal(epp.Args, []string{"--config=/etc/epp.yaml"}) {
		t.Fatalf("EPP container %s %v %v: image, command and args must be the user's", epp.Image, epp.Command, epp.Args)
	}
	if diff := cmp.Diff([]string{"EPP_PEERS_FILE", "POD_IP", "POD_IPS", "POD_NAME", "NAMESPACE", "MODE"}, envNames(epp)); diff != "" {
		t.Fatalf("EPP container env (-want +got):\n%s", diff)
	}
	if epp.Env[0].Value != "/var/run/epp-peers/peers.json" {
		t.Fatalf("EPP_PEERS_FILE %q", epp.Env[0].Value)
	}
	if len(epp.VolumeMounts) != 1 || epp.VolumeMounts[0].Name != "peers" || !epp.VolumeMounts[0].ReadOnly {
		t.Fatalf("EPP container mounts %+v: want only peers, read-only", epp.VolumeMounts)
	}
	if portsOf(epp)["peer-sync"] != 9005 {
		t.Fatalf("EPP container ports %v: the EPP owns peer-sync", portsOf(epp))
	}

	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %v", pod.InitContainers)
	}
	sc := pod.InitContainers[0]
	if sc.Name != "peer-discovery" || sc.Image != "epp-peer-discovery/epp:"+appVersion(t) || sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("sidecar %s %s %v: want our image as a native sidecar", sc.Name, sc.Image, sc.RestartPolicy)
	}
	wantArgs := []string{"--metrics-bind-address=:9091", "--health-probe-bind-address=:8082", "--enable-peer-discovery", "--epp-peer-service=epp",
		"--epp-peer-snapshot-file=/var/run/epp-peers/peers.json", "--zap-log-level=debug"}
	if diff := cmp.Diff(wantArgs, sc.Args); diff != "" {
		t.Fatalf("sidecar args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"EPP_PEER_MEMBERSHIP", "POD_IP", "POD_IPS", "POD_NAME", "NAMESPACE"}, envNames(sc)); diff != "" {
		t.Fatalf("sidecar env (-want +got):\n%s", diff)
	}
	if sc.Env[0].Value != "alive" {
		t.Fatalf("EPP_PEER_MEMBERSHIP=%q, want alive (the binary's --epp-peer-membership default)", sc.Env[0].Value)
	}
	if sc.StartupProbe == nil || sc.StartupProbe.HTTPGet == nil || sc.StartupProbe.HTTPGet.Path != "/readyz" {
		t.Fatalf("sidecar startup probe %+v: the EPP must start after the first peer set", sc.StartupProbe)
	}
	mounts := map[string]bool{}
	for _, m := range sc.VolumeMounts {
		mounts[m.Name+":"+m.MountPath] = m.ReadOnly
	}
	if diff := cmp.Diff(map[string]bool{"peers:/var/run/epp-peers": false, "kube-api-access:/var/run/secrets/kubernetes.io/serviceaccount": true}, mounts); diff != "" {
		t.Fatalf("sidecar mounts (-want +got):\n%s", diff)
	}
	var token bool
	for _, v := range pod.Volumes {
		if v.Name == "kube-api-access" && v.Projected != nil {
			for _, s := range v.Projected.Sources {
				token = token || s.ServiceAccountToken != nil
			}
		}
	}
	if !token {
		t.Fatal("no projected ServiceAccount token for the sidecar")
	}
	svc := servicePorts(only[*corev1.Service](t, r))
	if svc["peer-sync"] != 9005 || svc["http-peers"] != 9091 {
		t.Fatalf("Service ports %v: want peer-sync and the sidecar's http-peers", svc)
	}

	// Managed flags are refused for the sidecar too.
	if _, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar",
		"router.epp.peerDiscovery.sidecar.flags", map[string]any{"epp-peer-snapshot-file": "/tmp/x"})); err == nil ||
		!strings.Contains(err.Error(), "router.epp.peerDiscovery.sidecar.flags.epp-peer-snapshot-file") {
		t.Fatalf("a managed sidecar flag: %v", err)
	}
	// Mode sidecar without peer discovery renders no sidecar.
	if pod := podOf(t, renderChart(t, vals("router.epp.peerDiscovery.mode", "sidecar"))); len(pod.InitContainers) != 0 {
		t.Fatal("a sidecar with peer discovery off")
	}
}

func TestHelmTestHook(t *testing.T) {
	if got := hooks(t, nil); len(got) != 0 {
		t.Fatal("a helm test hook with peer discovery off")
	}
	if got := hooks(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.tests.enabled", false)); len(got) != 0 {
		t.Fatal("a helm test hook with tests.enabled=false")
	}
	for _, mode := range []string{"epp", "sidecar"} {
		pods := hooks(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", mode))
		if len(pods) != 1 {
			t.Fatalf("%s: %d hooks", mode, len(pods))
		}
		p := pods[0]
		if p.Annotations["helm.sh/hook"] != "test" || p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.ServiceAccountName != "epp" {
			t.Fatalf("%s: hook %+v", mode, p.ObjectMeta)
		}
		svc := only[*corev1.Service](t, renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", mode)))
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
			t.Fatalf("%s: the test pod's labels %v match the Service's selector %v: it would be an endpoint and a peer", mode, p.Labels, svc.Spec.Selector)
		}
		want := []string{"check-peers", "--service=epp", "--namespace=team-a", "--port-name=http-peers", "--membership=ready", "--timeout=60s"}
		if diff := cmp.Diff(want, p.Spec.Containers[0].Args); diff != "" {
			t.Fatalf("%s: check-peers args (-want +got):\n%s", mode, diff)
		}
		// With membership alive (leader election: only the leader is ready) the check
		// counts the not-ready replicas too, as the replicas do.
		alive := hooks(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", mode,
			"router.epp.leaderElection", mode == "epp", "router.epp.peerDiscovery.membership", "alive"))
		if args := alive[0].Spec.Containers[0].Args; !slices.Contains(args, "--membership=alive") {
			t.Fatalf("%s: membership alive: check-peers args %v lack --membership=alive", mode, args)
		}
		if img := p.Spec.Containers[0].Image; img != "epp-peer-discovery/epp:"+appVersion(t) {
			t.Fatalf("%s: the test pod runs %s, want the epp binary's image", mode, img)
		}
	}
}

// TestDefectsRefusedOrFixed: values that used to pass and then broke at run time,
// or to be refused although valid.
func TestDefectsRefusedOrFixed(t *testing.T) {
	refused := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"metrics on the health port", vals("router.epp.ports.metrics", 9003), []string{"router.epp.ports.grpcHealth and router.epp.ports.metrics are both port 9003"}},
		{"peer port on the ext-proc port", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.port", 9002),
			[]string{"router.epp.ports.extProc and router.epp.peerDiscovery.port are both port 9002"}},
		{"peer debug port on the metrics port", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.debugPort", 9090),
			[]string{"router.epp.ports.metrics and router.epp.peerDiscovery.debugPort are both port 9090"}},
		{"a duplicate port name", vals("router.epp.extraContainerPorts", []any{map[string]any{"name": "http-metrics", "containerPort": 7000}}),
			[]string{"router.epp.ports.metrics and router.epp.extraContainerPorts[0] both name a port \"http-metrics\""}},
		// Service ports used to be checked by the API server only, after the rest of
		// the release was applied.
		{"an extra Service port on the metrics port", vals("router.extraServicePorts", []any{map[string]any{"name": "http", "port": 9090}}),
			[]string{"router.epp.ports.metrics and router.extraServicePorts[0] are both port 9090: every port of the EPP Service must differ"}},
		{"an extra Service port on the peer port", vals("router.epp.peerDiscovery.enabled", true, "router.extraServicePorts", []any{map[string]any{"name": "sync", "port": 9005}}),
			[]string{"router.epp.peerDiscovery.port and router.extraServicePorts[0] are both port 9005"}},
		{"an extra Service port on the sidecar's peer view", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar",
			"router.extraServicePorts", []any{map[string]any{"name": "x", "port": 9091}}),
			[]string{"router.epp.peerDiscovery.sidecar.ports.metrics and router.extraServicePorts[0] are both port 9091"}},
		{"an extra Service port named as the chart's", vals("router.epp.peerDiscovery.enabled", true, "router.extraServicePorts", []any{map[string]any{"name": "http-peers", "port": 8081}}),
			[]string{"router.epp.peerDiscovery.debugPort and router.extraServicePorts[0] both name a port \"http-peers\": the port names of the EPP Service must differ"}},
		{"two extra Service ports alike", vals("router.extraServicePorts", []any{map[string]any{"name": "a", "port": 8081}, map[string]any{"name": "b", "port": 8081}}),
			[]string{"router.extraServicePorts[0] and router.extraServicePorts[1] are both port 8081"}},
		{"sidecar ports clash", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar", "router.epp.peerDiscovery.sidecar.ports.probes", 8081),
			[]string{"router.epp.ports.probes and router.epp.peerDiscovery.sidecar.ports.probes are both port 8081"}},
		{"maxUnavailable not a number or percentage", vals("router.epp.podDisruptionBudget.maxUnavailable", "abc"), []string{"maxUnavailable"}},
		{"top-level nameOverride (it belongs under router.epp)", map[string]any{"nameOverride": "x"}, []string{"nameOverride", "not allowed"}},
		{"top-level fullnameOverride", map[string]any{"fullnameOverride": "x"}, []string{"fullnameOverride", "not allowed"}},
		{"a configuration file that is not there", vals("router.epp.pluginsConfigFile", "mine.yaml"), []string{`router.epp.pluginsConfigFile="mine.yaml": no such file`}},
		{"a configuration that already names a peer discovery", vals("router.epp.peerDiscovery.enabled", true, "router.epp.pluginsConfigFile", "mine.yaml",
			"router.epp.pluginsCustomConfig", map[string]any{"mine.yaml": "plugins: []\ndataLayer:\n  peerDiscovery:\n    pluginRef: other\n"}),
			[]string{"mine.yaml already sets dataLayer.peerDiscovery"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render.Helm("epp", "team-a", tc.values)
			if err == nil {
				t.Fatalf("values %v accepted", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	for name, values := range map[string]map[string]any{
		"tests.timeout 1m30s":           vals("router.epp.peerDiscovery.enabled", true, "router.epp.tests.timeout", "1m30s"),
		"maxUnavailable 25%":            vals("router.epp.podDisruptionBudget.maxUnavailable", "25%"),
		"serviceMonitor interval 1m30s": vals("router.epp.serviceMonitor.interval", "1m30s"),
		// A number the chart's ports use, over another protocol, is another port.
		"an extra UDP Service port on 9090": vals("router.extraServicePorts", []any{map[string]any{"name": "udp", "port": 9090, "protocol": "UDP"}}),
		"upstream's extra Service port":     vals("router.epp.peerDiscovery.enabled", true, "router.extraServicePorts", []any{map[string]any{"name": "http", "port": 8081, "protocol": "TCP", "targetPort": 8081}}),
	} {
		if _, _, err := render.Helm("epp", "team-a", values); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

// TestProbeHandlers: a probe given with a handler is used as it is; the chart's
// default handler is added only to a probe without one (a grpc probe merged with the
// default httpGet had two handlers, which the API server rejects).
func TestProbeHandlers(t *testing.T) {
	r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar",
		"router.epp.readinessProbe", map[string]any{"grpc": map[string]any{"port": 9003}, "periodSeconds": 5}))
	c := render.EPPContainerOf(t, podOf(t, r).Containers)
	if p := c.ReadinessProbe; p.GRPC == nil || p.HTTPGet != nil || p.PeriodSeconds != 5 {
		t.Fatalf("sidecar mode, a grpc readiness probe: %+v, want grpc only", p)
	}
	if p := c.LivenessProbe; p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Fatalf("sidecar mode, the default liveness probe: %+v", p)
	}
	r = renderChart(t, vals("router.epp.livenessProbe", map[string]any{"httpGet": map[string]any{"path": "/live", "port": 8080}}))
	c = render.EPPContainerOf(t, podOf(t, r).Containers)
	if p := c.LivenessProbe; p.HTTPGet == nil || p.GRPC != nil || p.HTTPGet.Path != "/live" {
		t.Fatalf("mode epp, an httpGet liveness probe: %+v, want httpGet only", p)
	}
}

// TestSidecarNeedsNativeSidecars: mode sidecar on Kubernetes before 1.29 is refused
// with the reason (the chart's kubeVersion allows 1.27 for mode epp).
func TestSidecarNeedsNativeSidecars(t *testing.T) {
	old := &testenv.KubeVersion{Major: 1, Minor: 28, Patch: 5}
	_, err := render.HelmRender("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"), render.HelmOptions{Kube: old})
	if err == nil || !strings.Contains(err.Error(), "needs Kubernetes 1.29") {
		t.Fatalf("sidecar mode on 1.28: %v", err)
	}
	if _, err := render.HelmRender("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true), render.HelmOptions{Kube: old}); err != nil {
		t.Fatalf("mode epp on 1.28: %v", err)
	}
}
