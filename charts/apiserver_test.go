package charts_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/accept"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

var valueSets = []struct {
	name   string
	values map[string]any
}{
	{"default", nil},
	{"enabled", vals("router.epp.peerDiscovery.enabled", true)},
	{"enabled-custom", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.serviceName", "epp-peers",
		"router.epp.peerDiscovery.portName", "state-sync", "router.epp.peerDiscovery.port", 7000)},
	{"replicas-1", vals("router.epp.replicas", 1)},
	{"extra-env", vals("router.epp.env", []any{map[string]any{"name": "HF_TOKEN", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "hf", "key": "token"}}}})},
	{"flags", vals("router.epp.flags", map[string]any{"zap-log-level": "debug"})},
	{"sidecar", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar", "router.epp.args", consumerArgs)},
	{"state-sync", vals("router.epp.peerDiscovery.enabled", true, "router.epp.stateSync.enabled", true, "router.epp.stateSync.tls.secretName", "epp-peer-sync-tls",
		"router.epp.peerDiscovery.networkPolicy.enabled", true)},
	{"probing", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", "5s",
		"router.epp.peerDiscovery.networkPolicy.enabled", true)},
	{"extras", vals("router.epp.extraVolumes", []any{map[string]any{"name": "cache", "emptyDir": map[string]any{}}},
		"router.epp.extraVolumeMounts", []any{map[string]any{"name": "cache", "mountPath": "/cache"}},
		"router.epp.commonLabels", map[string]any{"team": "inference"}, "router.epp.podLabels", map[string]any{"tier": "routing"},
		"router.epp.serviceAccount.annotations", map[string]any{"example.com/role": "epp"})},
}

// TestRenderingsAcceptedUnderRestrictedPodSecurity sends every rendering, its helm
// test pod included, to the real API server in a namespace enforcing the restricted
// pod security level.
func TestRenderingsAcceptedUnderRestrictedPodSecurity(t *testing.T) {
	c, w := accept.Client(t, env)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			ns := accept.RestrictedNamespace(t, env, "chart-"+vs.name)
			r, err := render.HelmWith("epp", ns, vs.values)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := render.Decode([]byte(r.Manifest + "\n---\n" + r.Hooks))
			if err != nil {
				t.Fatal(err)
			}
			accept.Restricted(t, c, w, objs)
		})
	}
}

// TestRestrictedNamespaceRefusesAnInsecurePod shows that the namespace really enforces:
// the same template without its security contexts is refused.
func TestRestrictedNamespaceRefusesAnInsecurePod(t *testing.T) {
	c, _ := accept.Client(t, env)
	ns := accept.RestrictedNamespace(t, env, "chart-insecure")
	objs, err := render.HelmObjects("epp", ns, vals("router.epp.podSecurityContext", nil, "router.epp.securityContext", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if dep, ok := o.(*appsv1.Deployment); ok {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "epp-probe", Namespace: ns}, Spec: dep.Spec.Template.Spec}
			pod.Spec.ServiceAccountName = ""
			err := c.Create(context.Background(), pod, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), "restricted") {
				t.Fatalf("a pod without security context in a restricted namespace: %v", err)
			}
			return
		}
	}
	t.Fatal("no Deployment rendered")
}

func TestRBACOfTheRenderedServiceAccount(t *testing.T) {
	c, _ := accept.Client(t, env)
	on := accept.RestrictedNamespace(t, env, "rbac-on")
	off := accept.RestrictedNamespace(t, env, "rbac-off")
	elsewhere := accept.RestrictedNamespace(t, env, "rbac-elsewhere")
	sidecar := accept.RestrictedNamespace(t, env, "rbac-sidecar")
	shared := accept.RestrictedNamespace(t, env, "rbac-shared")
	for ns, values := range map[string]map[string]any{on: vals("router.epp.peerDiscovery.enabled", true), off: vals("router.monitoring.prometheus.auth.enabled", false),
		sidecar: vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"),
		shared:  vals("router.epp.peerDiscovery.enabled", true, "router.epp.serviceAccount.create", false, "router.epp.serviceAccount.name", "shared"),
	} {
		objs, err := render.HelmObjects("epp", ns, values)
		if err != nil {
			t.Fatal(err)
		}
		accept.Create(t, c, objs)
	}
	can := func(saNS, verb, group, resource, ns string) bool {
		return accept.Can(t, env, saNS, "epp", verb, group, resource, ns)
	}
	const disc = "discovery.k8s.io"
	for _, verb := range []string{"get", "list", "watch"} {
		if !can(on, verb, disc, "endpointslices", on) {
			t.Errorf("enabled: cannot %s endpointslices in its own namespace", verb)
		}
		if can(on, verb, disc, "endpointslices", elsewhere) {
			t.Errorf("enabled: can %s endpointslices in another namespace", verb)
		}
		if can(on, verb, disc, "endpointslices", "") {
			t.Errorf("enabled: can %s endpointslices cluster-wide", verb)
		}
		if can(off, verb, disc, "endpointslices", off) {
			t.Errorf("disabled: can %s endpointslices", verb)
		}
	}
	// Sidecar mode: the ServiceAccount (which only the sidecar's projected token
	// carries) may watch; a ServiceAccount not created by the chart is the one bound.
	if !can(sidecar, "watch", disc, "endpointslices", sidecar) {
		t.Error("sidecar: the ServiceAccount cannot watch endpointslices")
	}
	if !accept.Can(t, env, shared, "shared", "watch", disc, "endpointslices", shared) || accept.Can(t, env, shared, "epp", "watch", disc, "endpointslices", shared) {
		t.Error("serviceAccount.create=false name=shared: the RoleBinding must bind shared, and only it")
	}
	for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
		if can(on, verb, disc, "endpointslices", on) {
			t.Errorf("enabled: can %s endpointslices", verb)
		}
	}
	// llm-d-router's EPP reads its model server pods, in its namespace, nothing more.
	for _, ns := range []string{on, off} {
		for _, verb := range []string{"get", "list", "watch"} {
			if !can(ns, verb, "", "pods", ns) {
				t.Errorf("%s: the EPP cannot %s pods in its own namespace", ns, verb)
			}
			if can(ns, verb, "", "pods", elsewhere) {
				t.Errorf("%s: the EPP can %s pods in another namespace", ns, verb)
			}
		}
	}
	for _, r := range []struct{ verb, group, resource string }{
		{"get", "", "secrets"}, {"list", "", "secrets"}, {"create", "", "pods"}, {"delete", "", "pods"},
		{"list", "", "endpoints"}, {"list", "", "services"}, {"update", "coordination.k8s.io", "leases"},
	} {
		if can(on, r.verb, r.group, r.resource, on) {
			t.Errorf("enabled: can %s %s", r.verb, r.resource)
		}
	}
	// Metrics auth (the default): TokenReviews and SubjectAccessReviews, which are
	// cluster-scoped, and nothing else cluster-wide; off: neither.
	for _, r := range []struct{ group, resource string }{{"authentication.k8s.io", "tokenreviews"}, {"authorization.k8s.io", "subjectaccessreviews"}} {
		if !can(on, "create", r.group, r.resource, "") {
			t.Errorf("metrics auth on: cannot create %s", r.resource)
		}
		if can(off, "create", r.group, r.resource, "") {
			t.Errorf("metrics auth off: can create %s", r.resource)
		}
	}
	if can(on, "list", "", "pods", "") || can(on, "list", "", "secrets", "") {
		t.Error("metrics auth on: the EPP can list pods or secrets cluster-wide")
	}
	if can(sidecar, "list", "", "pods", sidecar) {
		t.Error("sidecar: the ServiceAccount can list pods: the EPP is the user's, the chart grants only the peer Role")
	}
}
