package kustomize_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// TestComponentsFindTheEPPContainerByName: an overlay that puts another container
// first still gets the peer flags, port and env on the epp container, and the other
// container is left alone.
func TestComponentsFindTheEPPContainerByName(t *testing.T) {
	sidecarFirst := `
patches:
  - target: {kind: Deployment, name: epp}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0
        value: {name: proxy, image: example.com/proxy:1, args: [--listen=:8000]}
`
	for _, tc := range []struct {
		components []string
		check      func(t *testing.T, epp corev1.Container, pod corev1.PodSpec)
	}{
		{[]string{"peer-discovery"}, func(t *testing.T, epp corev1.Container, _ corev1.PodSpec) {
			if !slices.Contains(envOf(epp), "EPP_PEER_SERVICE=epp") || !slices.ContainsFunc(epp.Ports, func(p corev1.ContainerPort) bool { return p.Name == "peer-sync" }) {
				t.Fatalf("epp container %+v lacks the plugin's env or the peer port", epp)
			}
		}},
		{[]string{"peer-discovery", "peer-membership-alive"}, func(t *testing.T, epp corev1.Container, _ corev1.PodSpec) {
			if !slices.Contains(envOf(epp), "EPP_PEER_MEMBERSHIP=alive") {
				t.Fatalf("epp container env %v lacks the membership", envOf(epp))
			}
		}},
		{[]string{"peer-discovery", "peer-probe"}, func(t *testing.T, epp corev1.Container, _ corev1.PodSpec) {
			if !slices.ContainsFunc(epp.Env, func(e corev1.EnvVar) bool { return e.Name == "EPP_PEER_PROBE_INTERVAL" && e.Value == "5s" }) {
				t.Fatalf("epp container env %v lacks the probe interval", epp.Env)
			}
		}},
		{[]string{"peer-discovery-sidecar"}, func(t *testing.T, epp corev1.Container, pod corev1.PodSpec) {
			if !slices.ContainsFunc(epp.Env, func(e corev1.EnvVar) bool { return e.Name == "EPP_PEERS_FILE" }) || len(pod.InitContainers) != 1 {
				t.Fatalf("sidecar mode: epp env %v, init containers %d", epp.Env, len(pod.InitContainers))
			}
		}},
	} {
		t.Run(tc.components[len(tc.components)-1], func(t *testing.T) {
			k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents:\n"
			for _, c := range tc.components {
				k += "  - ../../components/" + c + "\n"
			}
			objs, err := render.KustomizeOverlay("proxy-first-"+tc.components[len(tc.components)-1], k+sidecarFirst)
			if err != nil {
				t.Fatal(err)
			}
			pod := one[*appsv1.Deployment](t, objs).Spec.Template.Spec
			if pod.Containers[0].Name != "proxy" {
				t.Fatalf("containers %v: the overlay did not put proxy first", pod.Containers)
			}
			proxy := pod.Containers[0]
			if !slices.Equal(proxy.Args, []string{"--listen=:8000"}) || len(proxy.Env) != 0 || len(proxy.Ports) != 0 || len(proxy.VolumeMounts) != 0 {
				t.Fatalf("the component changed the other container: %+v", proxy)
			}
			tc.check(t, render.EPPContainerOf(t, pod.Containers), pod)
		})
	}
}

// TestComponentObjectsCarryTheBaseLabels: the objects a component adds (the peer Role
// and RoleBinding, the headless Service, the NetworkPolicy) have exactly the labels
// of the base's objects.
func TestComponentObjectsCarryTheBaseLabels(t *testing.T) {
	for _, c := range []string{"peer-discovery", "peer-discovery-sidecar", "peer-discovery-dns"} {
		objs := userOverlay(t, "team-a", "router-", c, "peer-network-policy")
		want := one[*corev1.ServiceAccount](t, objs).Labels
		if len(want) < 4 {
			t.Fatalf("base ServiceAccount labels %v", want)
		}
		for _, o := range objs {
			if diff := cmp.Diff(want, o.GetLabels()); diff != "" {
				t.Errorf("%s: %s labels (-base +object):\n%s", c, render.Key(o), diff)
			}
		}
		np := one[*networkingv1.NetworkPolicy](t, objs)
		if diff := cmp.Diff(want, np.Labels); diff != "" {
			t.Errorf("%s: NetworkPolicy labels (-base +NetworkPolicy):\n%s", c, diff)
		}
		// The policy selects exactly the Deployment's pods and admits peer-sync from
		// them; an empty selector would select, and admit, every pod of the namespace.
		sel := one[*appsv1.Deployment](t, objs).Spec.Selector.MatchLabels
		if len(sel) == 0 || !maps.Equal(np.Spec.PodSelector.MatchLabels, sel) || len(np.Spec.Ingress[0].From) != 1 ||
			!maps.Equal(np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, sel) {
			t.Errorf("%s: NetworkPolicy %s selects %v and admits %v, want the Deployment's selector %v",
				c, np.Name, np.Spec.PodSelector, np.Spec.Ingress[0].From, sel)
		}
		if np.Name != "router-epp-peer-sync" {
			t.Errorf("%s: NetworkPolicy name %q, want the prefix applied", c, np.Name)
		}
	}
}

// TestComponentsRefuseTheWrongMode: a component that fits only one way of running
// peer discovery refuses to build with the other (they used to build silently: the
// EPP's args overwritten, or a sidecar without an image).
func TestComponentsRefuseTheWrongMode(t *testing.T) {
	for _, tc := range [][]string{
		{"peer-discovery-sidecar", "peer-membership-alive"},
		{"peer-discovery-sidecar", "peer-probe"},
		{"peer-discovery", "peer-membership-alive-sidecar"},
		{"peer-discovery", "peer-probe-sidecar"},
		{"peer-probe"},
		{"peer-membership-alive-sidecar"},
		{"peer-discovery-sidecar", "state-sync"},
		{"peer-discovery-sidecar", "state-sync-tls"},
		{"state-sync"},
	} {
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents:\n"
		for _, c := range tc {
			k += "  - ../../components/" + c + "\n"
		}
		_, err := render.KustomizeOverlay("wrong-"+strings.Join(tc, "-"), k)
		if err == nil || !strings.Contains(err.Error(), "epp-peer-discovery~1mode") {
			t.Errorf("components %v: %v, want a refusal naming the mode marker", tc, err)
		}
	}
	// The sidecar form of alive works with the sidecar.
	objs := userOverlay(t, "", "", "peer-discovery-sidecar", "peer-membership-alive-sidecar", "peer-probe-sidecar")
	sc := one[*appsv1.Deployment](t, objs).Spec.Template.Spec.InitContainers[0]
	if e := envOf(sc); !slices.Contains(e, "EPP_PEER_MEMBERSHIP=alive") || !slices.Contains(e, "EPP_PEER_PROBE_INTERVAL=5s") || sc.Image == "" {
		t.Fatalf("sidecar %s env %v: want membership alive and probing", sc.Image, e)
	}
}

// TestComponentsRefuseCombinationsThatCannotWork: state-sync-tls,
// shared-prefix-index or shared-scraping without state-sync (settings for a syncer that is not there),
// tracing on an EPP container that is the user's, and peer-discovery-dns with
// peer-discovery or peer-discovery-sidecar (an endpointslices Role DNS does not
// need, two plugins' settings on one EPP) fail to build, in either order, with a
// message that names the cause (state-sync-tls and peer-discovery-dns used to build
// silently).
func TestComponentsRefuseCombinationsThatCannotWork(t *testing.T) {
	alternatives := "peer-discovery-dns and peer-discovery (or peer-discovery-sidecar) are alternatives"
	for _, tc := range []struct {
		components []string
		want       string
	}{
		{[]string{"peer-discovery", "state-sync-tls"}, "epp-peer-discovery~1state-sync"},
		{[]string{"peer-discovery", "state-sync-tls", "state-sync"}, "epp-peer-discovery~1state-sync"},
		{[]string{"peer-discovery", "peer-discovery-dns"}, alternatives},
		{[]string{"peer-discovery-dns", "peer-discovery"}, alternatives},
		{[]string{"peer-discovery-sidecar", "peer-discovery-dns"}, alternatives},
		{[]string{"peer-discovery-dns", "peer-discovery-sidecar"}, alternatives},
		// The shared prefix index travels over the syncer's connections.
		{[]string{"peer-discovery", "shared-prefix-index"}, "epp-peer-discovery~1state-sync"},
		{[]string{"shared-prefix-index"}, "epp-peer-discovery~1state-sync"},
		{[]string{"peer-discovery", "shared-prefix-index", "state-sync"}, "epp-peer-discovery~1state-sync"},
		// Shared scraping shares over the syncer's connections, and reads the file
		// state-sync writes.
		{[]string{"peer-discovery", "shared-scraping"}, "epp-peer-discovery~1state-sync"},
		{[]string{"peer-discovery", "shared-scraping", "state-sync"}, "epp-peer-discovery~1state-sync"},
		// The EPP container is the user's in sidecar mode: tracing sets llm-d-router's EPP's flag.
		{[]string{"peer-discovery-sidecar", "tracing"}, "epp-peer-discovery~1epp-container"},
	} {
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents:\n"
		for _, c := range tc.components {
			k += "  - ../../components/" + c + "\n"
		}
		_, err := render.KustomizeOverlay("refused-"+strings.Join(tc.components, "-"), k)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("components %v: %v, want a refusal naming %q", tc.components, err, tc.want)
		} else {
			t.Logf("components %v: %v", tc.components, err)
		}
	}
	// Each alone, and state-sync-tls after state-sync, still build; tracing with
	// metrics-auth (both patch the base's args by position) too.
	for _, c := range [][]string{{"peer-discovery-dns"}, {"peer-discovery"}, {"peer-discovery-sidecar"}, {"peer-discovery", "state-sync", "state-sync-tls"},
		{"metrics-auth", "tracing"}, {"tracing", "metrics-auth", "peer-discovery"}} {
		userOverlay(t, "", "", c...)
	}
}

// TestOneVersion: the chart's appVersion is the version of every channel: the
// kustomize images (base and sidecar component), the version label, the root
// module's version that llmdrouter/ requires, and the Helm 4 plugin's.
func TestOneVersion(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join(root, "charts", "epp", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("no appVersion in Chart.yaml")
	}
	version := string(m[1])
	for _, c := range [][]string{nil, {"peer-discovery"}, {"peer-discovery-sidecar"}} {
		objs := userOverlay(t, "", "", c...)
		pod := one[*appsv1.Deployment](t, objs).Spec.Template.Spec
		for _, ct := range pod.Containers {
			if ct.Image != "epp-peer-discovery/llm-d-router-epp:"+version {
				t.Errorf("components %v: container %s image %s, want the chart's appVersion %s (run make set-version VERSION=%s)", c, ct.Name, ct.Image, version, version)
			}
		}
		for _, ct := range pod.InitContainers {
			if ct.Image != "epp-peer-discovery/epp:"+version {
				t.Errorf("components %v: sidecar %s image %s, want the chart's appVersion %s (run make set-version VERSION=%s)", c, ct.Name, ct.Image, version, version)
			}
		}
		if got := one[*corev1.Service](t, objs).Labels["app.kubernetes.io/version"]; got != version {
			t.Errorf("version label %q, want %s", got, version)
		}
	}
	// llmdrouter/ is released with the root module under one version: its go.mod
	// requires that release of the root (its replace serves clones, and users' go get
	// ignores it).
	gomod, err := os.ReadFile(filepath.Join(root, "llmdrouter", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*github\.com/epp-peer-discovery/epp-peer-discovery v` + regexp.QuoteMeta(version) + `$`).Match(gomod) {
		t.Errorf("llmdrouter/go.mod does not require github.com/epp-peer-discovery/epp-peer-discovery v%s, the chart's appVersion (run make set-version VERSION=%s)", version, version)
	}
	// The Helm 4 plugin of epp post-render is released with the rest.
	plugin, err := os.ReadFile(filepath.Join(root, "charts", "epp-post-render", "plugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^version: ` + regexp.QuoteMeta(version) + `\b`).Match(plugin) {
		t.Errorf("charts/epp-post-render/plugin.yaml: version is not the chart's appVersion %s (run make set-version VERSION=%s)", version, version)
	}
	// The sidecar overlay runs epp as its stand-in EPP: the same version.
	for _, ct := range one[*appsv1.Deployment](t, build(t, "/kustomize/overlays/sidecar")).Spec.Template.Spec.Containers {
		if ct.Image != "epp-peer-discovery/epp:"+version {
			t.Errorf("overlays/sidecar: container %s image %s, want %s", ct.Name, ct.Image, version)
		}
	}
}

// TestSidecarOverlay: overlays/sidecar runs epp beside the EPP container, which gets
// the peers file and no API access.
func TestSidecarOverlay(t *testing.T) {
	objs := build(t, "/kustomize/overlays/sidecar")
	pod := one[*appsv1.Deployment](t, objs).Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Fatal("the pod automounts the ServiceAccount token: only the sidecar may have it")
	}
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %v", pod.InitContainers)
	}
	sc := pod.InitContainers[0]
	if sc.Name != "peer-discovery" || sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways || sc.StartupProbe == nil {
		t.Fatalf("sidecar %+v: want a native sidecar with a startup probe", sc)
	}
	wantArgs := []string{"--metrics-bind-address=:9091", "--health-probe-bind-address=:8082", "--enable-peer-discovery", "--epp-peer-service", "epp",
		"--epp-peer-snapshot-file=/var/run/epp-peers/peers.json"}
	if diff := cmp.Diff(wantArgs, sc.Args); diff != "" {
		t.Fatalf("sidecar args (-want +got):\n%s", diff)
	}
	epp := render.EPPContainerOf(t, pod.Containers)
	if diff := cmp.Diff(append([]string{"EPP_PEERS_FILE=/var/run/epp-peers/peers.json"}, identity...), envOf(epp)); diff != "" {
		t.Fatalf("EPP container env (-want +got):\n%s", diff)
	}
	if !slices.Contains(epp.Args, "--epp-peer-file=$(EPP_PEERS_FILE)") {
		t.Fatalf("EPP container args %v", epp.Args)
	}
	mounts := func(c corev1.Container) map[string]bool {
		out := map[string]bool{}
		for _, m := range c.VolumeMounts {
			out[m.Name] = m.ReadOnly
		}
		return out
	}
	if got := mounts(epp); len(got) != 1 || !got["peers"] {
		t.Fatalf("EPP container mounts %v: want only peers, read-only", got)
	}
	if got := mounts(sc); len(got) != 2 || got["peers"] || !got["kube-api-access"] {
		t.Fatalf("sidecar mounts %v: want peers (read-write) and kube-api-access (read-only)", got)
	}
	if diff := cmp.Diff(peerRule, one[*rbacv1.Role](t, objs).Rules); diff != "" {
		t.Fatalf("Role rules (-want +got):\n%s", diff)
	}
	if n := len(find[*corev1.ConfigMap](t, objs)); n != 0 {
		t.Fatalf("%d ConfigMaps: the EPP is the user's, the base's configuration for llm-d-router's EPP goes", n)
	}
}

// TestMetricsAuthComponent: metrics-auth turns llm-d-router's metrics auth on, as the
// chart's default: the flag, and the ServiceAccount of the overlay's namespace bound
// to system:auth-delegator; the base serves plain metrics with no cluster-scoped RBAC.
func TestMetricsAuthComponent(t *testing.T) {
	objs := userOverlay(t, "team-a", "router-", "peer-discovery", "metrics-auth")
	epp := render.EPPContainerOf(t, one[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers)
	if !slices.Contains(epp.Args, "--metrics-endpoint-auth=true") || slices.Contains(epp.Args, "--metrics-endpoint-auth=false") {
		t.Fatalf("args %v: want metrics auth on", epp.Args)
	}
	crb := one[*rbacv1.ClusterRoleBinding](t, objs)
	want := rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "router-epp", Namespace: "team-a"}},
	}
	if crb.Name != "router-epp-metrics-auth" || !cmp.Equal(want.RoleRef, crb.RoleRef) || !cmp.Equal(want.Subjects, crb.Subjects) {
		t.Fatalf("ClusterRoleBinding %s: %+v %+v", crb.Name, crb.RoleRef, crb.Subjects)
	}
	if diff := cmp.Diff(one[*corev1.ServiceAccount](t, objs).Labels, crb.Labels); diff != "" {
		t.Fatalf("ClusterRoleBinding labels (-base +binding):\n%s", diff)
	}
}
