package kustomize_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

func build(t *testing.T, dir string) []client.Object {
	t.Helper()
	fsys, err := render.KustomizeFS()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Kustomize(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// userOverlay builds an overlay of the kind the README shows: the base, the named
// components of kustomize/components, a namespace and a name prefix.
func userOverlay(t *testing.T, namespace, prefix string, components ...string) []client.Object {
	t.Helper()
	return userOverlayWith(t, namespace, prefix, "", components...)
}

// userOverlayWith is userOverlay with more kustomization fields (extra, YAML).
func userOverlayWith(t *testing.T, namespace, prefix, extra string, components ...string) []client.Object {
	t.Helper()
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../base\n" + extra
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			k += "  - ../../components/" + c + "\n"
		}
	}
	if namespace != "" {
		k += "namespace: " + namespace + "\n"
	}
	if prefix != "" {
		// As the README's overlay: a name prefix and nothing else (the base renames its
		// instance label with the Deployment).
		k += "namePrefix: " + prefix + "\n"
	}
	objs, err := render.KustomizeOverlay(fmt.Sprintf("user-%s-%s-%s-%d", namespace, prefix, strings.Join(components, "-"), len(extra)), k)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find[T client.Object](t *testing.T, objs []client.Object) []T {
	t.Helper()
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func one[T client.Object](t *testing.T, objs []client.Object) T {
	t.Helper()
	found := find[T](t, objs)
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T, got %d", zero, len(found))
	}
	return found[0]
}

// peerRule is the Role of the replica contract (internal/contract).
var peerRule = contract.For(contract.Options{}).Rules

// TestOverlaysMeetTheReplicaContract: each overlay with the EndpointSlice peer
// discovery builds what internal/contract declares that a replica needs: the env,
// the container's and the Service's ports, and the Role.
func TestOverlaysMeetTheReplicaContract(t *testing.T) {
	for _, dir := range []string{"/kustomize/overlays/peer-discovery", "/kustomize/overlays/state-sync", "/kustomize/overlays/shared-prefix-index"} {
		for _, s := range render.ShortOfContract(build(t, dir), contract.Options{Service: "epp"}) {
			t.Errorf("%s: %s", dir, s)
		}
	}
}

// eppArgs are the args of llm-d-router's EPP in the base: peer discovery adds none.
var eppArgs = []string{"--config-file=/config/default-plugins.yaml", "--endpoint-selector=app.kubernetes.io/component=model-server",
	"--endpoint-target-ports=8000", "--grpc-port=9002", "--grpc-health-port=9003", "--metrics-port=9090", "--metrics-endpoint-auth=false",
	"--zap-encoder=json", "--tracing=false"}

// envOf is a container's env as NAME=value (NAME=fieldPath for downward-API ones).
func envOf(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			out = append(out, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
		} else {
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}

// config is the EPP configuration file of the overlay (the one its --config-file
// names), decoded.
func config(t *testing.T, objs []client.Object) map[string]any {
	t.Helper()
	file := eppConfigFileOf(objs)
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasSuffix(cm.Name, "epp-config") {
			content, ok := cm.Data[file]
			if !ok {
				t.Fatalf("the EPP reads /config/%s, which ConfigMap %s does not hold", file, cm.Name)
			}
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
				t.Fatal(err)
			}
			return cfg
		}
	}
	t.Fatal("no epp-config ConfigMap")
	return nil
}

// pluginOf is the configuration's peer-discovery plugin type and pluginRef.
func pluginOf(t *testing.T, objs []client.Object) (typ, ref string) {
	t.Helper()
	cfg := config(t, objs)
	for _, p := range cfg["plugins"].([]any) {
		if m := p.(map[string]any); m["name"] == "peer-discovery" {
			typ, _ = m["type"].(string)
		}
	}
	if dl, ok := cfg["dataLayer"].(map[string]any); ok {
		if pd, ok := dl["peerDiscovery"].(map[string]any); ok {
			ref, _ = pd["pluginRef"].(string)
		}
	}
	return typ, ref
}

var identity = []string{"POD_IP=status.podIP", "POD_IPS=status.podIPs", "POD_NAME=metadata.name", "NAMESPACE=metadata.namespace"}

func TestOverlays(t *testing.T) {
	tests := []struct {
		dir        string
		pluginType string // "" when off
		pluginEnv  []string
		peerPorts  []string
		extraKeys  []string
	}{
		{dir: "/kustomize/overlays/default"},
		{dir: "/kustomize/base"},
		{dir: "/kustomize/overlays/peer-discovery", pluginType: "endpointslice-peer-discovery",
			pluginEnv: []string{"EPP_PEER_SERVICE=epp", "EPP_PEER_DEBUG_ADDRESS=:9091"}, peerPorts: []string{"http-peers", "peer-sync"},
			extraKeys: []string{"Role//epp-peer-discovery", "RoleBinding//epp-peer-discovery"}},
		{dir: "/kustomize/overlays/state-sync", pluginType: "endpointslice-peer-discovery",
			pluginEnv: []string{"EPP_PEER_SYNC_ADDRESS=:9005", "EPP_PEER_SERVICE=epp", "EPP_PEER_DEBUG_ADDRESS=:9091"}, peerPorts: []string{"http-peers", "peer-sync"},
			extraKeys: []string{"Role//epp-peer-discovery", "RoleBinding//epp-peer-discovery"}},
		{dir: "/kustomize/overlays/shared-prefix-index", pluginType: "endpointslice-peer-discovery",
			pluginEnv: []string{"EPP_PEER_SYNC_ADDRESS=:9005", "EPP_PEER_SERVICE=epp", "EPP_PEER_DEBUG_ADDRESS=:9091"}, peerPorts: []string{"http-peers", "peer-sync"},
			extraKeys: []string{"Role//epp-peer-discovery", "RoleBinding//epp-peer-discovery"}},
		{dir: "/kustomize/overlays/dns", pluginType: "dns-peer-discovery",
			pluginEnv: []string{"EPP_PEER_DNS_SERVICE=epp-peers", "EPP_PEER_DEBUG_ADDRESS=:9091"}, peerPorts: []string{"http-peers", "peer-sync"},
			extraKeys: []string{"Service//epp-peers"}},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			objs := build(t, tc.dir)
			var keys []string
			for _, o := range objs {
				keys = append(keys, render.Key(o))
			}
			want := append([]string{"ConfigMap//epp-config", "Deployment//epp", "PodDisruptionBudget//epp", "Role//epp", "RoleBinding//epp",
				"Service//epp", "ServiceAccount//epp"}, tc.extraKeys...)
			slices.Sort(want)
			slices.Sort(keys)
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Fatalf("objects (-want +got):\n%s", diff)
			}
			for _, r := range find[*rbacv1.Role](t, objs) {
				if r.Name == "epp-peer-discovery" {
					if diff := cmp.Diff(peerRule, r.Rules); diff != "" {
						t.Fatalf("peer Role rules (-want +got):\n%s", diff)
					}
				}
			}
			if n := len(find[*rbacv1.ClusterRole](t, objs)) + len(find[*rbacv1.ClusterRoleBinding](t, objs)); n != 0 {
				t.Fatalf("%d cluster-scoped RBAC objects", n)
			}
			if typ, ref := pluginOf(t, objs); typ != tc.pluginType || (tc.pluginType != "") != (ref == "peer-discovery") {
				t.Fatalf("EPP configuration: plugin %q, pluginRef %q; want %q", typ, ref, tc.pluginType)
			}
			pod := one[*appsv1.Deployment](t, objs).Spec.Template.Spec
			c := pod.Containers[0]
			if diff := cmp.Diff(eppArgs, c.Args); diff != "" {
				t.Fatalf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(append(slices.Clone(tc.pluginEnv), identity...), envOf(c)); diff != "" {
				t.Fatalf("env (-want +got):\n%s", diff)
			}
			var ports, svcPorts []string
			for _, p := range c.Ports {
				if p.Name == "peer-sync" || p.Name == "http-peers" {
					ports = append(ports, p.Name)
				}
			}
			for _, s := range find[*corev1.Service](t, objs) {
				if s.Name != "epp" {
					continue
				}
				for _, p := range s.Spec.Ports {
					if p.Name == "peer-sync" || p.Name == "http-peers" {
						svcPorts = append(svcPorts, p.Name)
					}
				}
			}
			slices.Sort(ports)
			slices.Sort(svcPorts)
			if !slices.Equal(ports, tc.peerPorts) || !slices.Equal(svcPorts, tc.peerPorts) {
				t.Fatalf("peer ports on the container %v, on the Service %v; want %v", ports, svcPorts, tc.peerPorts)
			}
			if !*pod.AutomountServiceAccountToken {
				t.Fatal("automountServiceAccountToken false: llm-d-router's EPP reads its model server pods")
			}
		})
	}
}

// TestNamePrefixAndNamespace: under an overlay's namePrefix and namespace, the plugin's
// EPP_PEER_SERVICE still names the (renamed) Service and the RoleBinding the
// (renamed) ServiceAccount.
func TestNamePrefixAndNamespace(t *testing.T) {
	objs := userOverlay(t, "team-a", "router-", "peer-discovery")
	var svc *corev1.Service
	for _, s := range find[*corev1.Service](t, objs) {
		svc = s
	}
	if svc.Name != "router-epp" || svc.Namespace != "team-a" {
		t.Fatalf("Service %s/%s", svc.Namespace, svc.Name)
	}
	dep := one[*appsv1.Deployment](t, objs)
	if e := envOf(dep.Spec.Template.Spec.Containers[0]); !slices.Contains(e, "EPP_PEER_SERVICE=router-epp") {
		t.Fatalf("env %v: EPP_PEER_SERVICE must name the Service %q", e, svc.Name)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "router-epp" {
		t.Fatalf("serviceAccountName %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
	if cm := dep.Spec.Template.Spec.Volumes[0].ConfigMap; cm == nil || cm.Name != "router-epp-config" {
		t.Fatalf("config volume %+v: want the renamed ConfigMap", dep.Spec.Template.Spec.Volumes[0])
	}
	var role *rbacv1.Role
	var rb *rbacv1.RoleBinding
	for _, r := range find[*rbacv1.Role](t, objs) {
		if strings.HasSuffix(r.Name, "peer-discovery") {
			role = r
		}
	}
	for _, r := range find[*rbacv1.RoleBinding](t, objs) {
		if strings.HasSuffix(r.Name, "peer-discovery") {
			rb = r
		}
	}
	if role == nil || role.Name != "router-epp-peer-discovery" || role.Namespace != "team-a" {
		t.Fatalf("Role %+v", role)
	}
	want := rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "router-epp-peer-discovery"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "router-epp", Namespace: "team-a"}},
	}
	if diff := cmp.Diff(want.RoleRef, rb.RoleRef); diff != "" {
		t.Fatalf("roleRef (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Subjects, rb.Subjects); diff != "" {
		t.Fatalf("subjects (-want +got):\n%s", diff)
	}
	// A suffix too, and the DNS component's headless Service.
	objs, err := render.KustomizeOverlay("suffix", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/peer-discovery]\nnameSuffix: -blue\n")
	if err != nil {
		t.Fatal(err)
	}
	if e := envOf(one[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0]); !slices.Contains(e, "EPP_PEER_SERVICE=epp-blue") {
		t.Fatalf("with nameSuffix -blue the env is %v", e)
	}
	objs = userOverlay(t, "team-a", "router-", "peer-discovery-dns")
	if e := envOf(one[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0]); !slices.Contains(e, "EPP_PEER_DNS_SERVICE=router-epp-peers") {
		t.Fatalf("dns: env %v: EPP_PEER_DNS_SERVICE must name the renamed headless Service", e)
	}
}

// TestTwoPrefixedOverlaysInOneNamespace: two overlays of the base with their own name
// prefixes and nothing else, in one namespace, select only their own pods: the
// instance label follows the Deployment's name (with the base's fixed instance label
// they selected each other's, and mixed their peer sets, unless each overlay set the
// label itself as the README used to ask). Every selector counts: the Deployment's,
// the Services', the PodDisruptionBudget's and the NetworkPolicy's.
func TestTwoPrefixedOverlaysInOneNamespace(t *testing.T) {
	blue := userOverlay(t, "team-a", "blue-", "peer-discovery", "peer-network-policy")
	green := userOverlay(t, "team-a", "green-", "peer-discovery-dns", "peer-network-policy")
	podsOf := func(objs []client.Object) labels.Set {
		return labels.Set(one[*appsv1.Deployment](t, objs).Spec.Template.Labels)
	}
	for _, c := range []struct {
		name     string
		objs     []client.Object
		own, not labels.Set
	}{{"blue", blue, podsOf(blue), podsOf(green)}, {"green", green, podsOf(green), podsOf(blue)}} {
		var selectors []labels.Selector
		selectors = append(selectors, labels.SelectorFromSet(one[*appsv1.Deployment](t, c.objs).Spec.Selector.MatchLabels))
		for _, s := range find[*corev1.Service](t, c.objs) {
			selectors = append(selectors, labels.SelectorFromSet(s.Spec.Selector))
		}
		selectors = append(selectors, labels.SelectorFromSet(one[*policyv1.PodDisruptionBudget](t, c.objs).Spec.Selector.MatchLabels))
		np := one[*networkingv1.NetworkPolicy](t, c.objs)
		selectors = append(selectors, labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels), labels.SelectorFromSet(np.Spec.Ingress[0].From[0].PodSelector.MatchLabels))
		for _, sel := range selectors {
			if !sel.Matches(c.own) || sel.Matches(c.not) {
				t.Fatalf("%s: selector %s matches its own pods %v, the other overlay's %v", c.name, sel, sel.Matches(c.own), sel.Matches(c.not))
			}
		}
	}
}

// TestInstanceLabelFollowsTheName: under a prefix, a suffix or both, every object's
// instance label and every selector name the renamed Deployment; an overlay that sets
// the label itself keeps its value.
func TestInstanceLabelFollowsTheName(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"namePrefix: router-\n", "router-epp"},
		{"nameSuffix: -blue\n", "epp-blue"},
		{"namePrefix: router-\nnameSuffix: -blue\n", "router-epp-blue"},
		{"", "epp"},
		{"namePrefix: router-\nlabels:\n  - pairs: {app.kubernetes.io/instance: mine}\n    includeSelectors: true\n", "mine"},
	} {
		objs := userOverlayWith(t, "team-a", "", tc.extra, "peer-discovery", "peer-network-policy")
		for _, o := range objs {
			if got := o.GetLabels()["app.kubernetes.io/instance"]; got != tc.want {
				t.Errorf("%q: %s instance label %q, want %q", tc.extra, render.Key(o), got, tc.want)
			}
		}
		dep := one[*appsv1.Deployment](t, objs)
		for what, sel := range map[string]map[string]string{
			"Deployment selector": dep.Spec.Selector.MatchLabels, "pod template": dep.Spec.Template.Labels,
			"Service selector":             one[*corev1.Service](t, objs).Spec.Selector,
			"PodDisruptionBudget selector": one[*policyv1.PodDisruptionBudget](t, objs).Spec.Selector.MatchLabels,
			"NetworkPolicy podSelector":    one[*networkingv1.NetworkPolicy](t, objs).Spec.PodSelector.MatchLabels,
		} {
			if sel["app.kubernetes.io/instance"] != tc.want {
				t.Errorf("%q: %s %v, want instance %q", tc.extra, what, sel, tc.want)
			}
		}
	}
}
