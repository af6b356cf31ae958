package charts_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/testsupport/render"
)

// warnings collects the API server's warnings (pod security "warn" mode among them).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// restrictedNamespace creates a namespace that enforces, warns and audits the
// restricted pod security level.
func restrictedNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), prefix, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// install renders the chart into ns and creates every object for real.
func install(t *testing.T, c client.Client, ns string, values map[string]any) []client.Object {
	t.Helper()
	objs, err := render.HelmObjects("epp", ns, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("creating %s: %v", render.Key(o), err)
		}
	}
	return objs
}

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
}

// TestRenderingsAcceptedUnderRestrictedPodSecurity sends every rendering to the real
// API server in a namespace enforcing the restricted level: a server-side dry run of
// each object with strict field validation, then a real create, then a dry-run Pod
// from the Deployment's template (pod security enforces on Pods). No warning may come
// back.
func TestRenderingsAcceptedUnderRestrictedPodSecurity(t *testing.T) {
	ctx := context.Background()
	c, w := warningClient(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			ns := restrictedNamespace(t, "chart-"+vs.name)
			objs, err := render.HelmObjects("epp", ns, vs.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if err := c.Create(ctx, o.DeepCopyObject().(client.Object), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
					t.Fatalf("server-side dry run of %s: %v", render.Key(o), err)
				}
			}
			install(t, c, ns, vs.values)
			var dep appsv1.Deployment
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "epp"}, &dep); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "epp-probe", Namespace: ns, Labels: dep.Spec.Template.Labels}, Spec: dep.Spec.Template.Spec}
			if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
				t.Fatalf("a Pod of the Deployment's template is refused: %v", err)
			}
			if ws := w.take(); len(ws) > 0 {
				t.Fatalf("API server warnings: %v", ws)
			}
		})
	}
}

// TestRestrictedNamespaceRefusesAnInsecurePod shows that the namespace really enforces:
// the same template without its security context is refused.
func TestRestrictedNamespaceRefusesAnInsecurePod(t *testing.T) {
	ctx := context.Background()
	c, _ := warningClient(t)
	ns := restrictedNamespace(t, "chart-insecure")
	objs, err := render.HelmObjects("epp", ns, vals("router.epp.podSecurityContext", nil, "router.epp.securityContext", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if dep, ok := o.(*appsv1.Deployment); ok {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "epp-probe", Namespace: ns}, Spec: dep.Spec.Template.Spec}
			pod.Spec.ServiceAccountName = ""
			err := c.Create(ctx, pod, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), "restricted") {
				t.Fatalf("a pod without security context in a restricted namespace: %v", err)
			}
			return
		}
	}
	t.Fatal("no Deployment rendered")
}

// can asks the API server whether the chart's ServiceAccount may do verb on
// resource in namespace ("" = cluster-wide).
func can(t *testing.T, saNamespace, verb, group, resource, namespace string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   fmt.Sprintf("system:serviceaccount:%s:epp", saNamespace),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: group, Resource: resource,
		},
	}}
	res, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status.Allowed
}

func TestRBACOfTheRenderedServiceAccount(t *testing.T) {
	c, _ := warningClient(t)
	on := restrictedNamespace(t, "rbac-on")
	off := restrictedNamespace(t, "rbac-off")
	elsewhere := restrictedNamespace(t, "rbac-elsewhere")
	install(t, c, on, vals("router.epp.peerDiscovery.enabled", true))
	install(t, c, off, nil)

	const disc = "discovery.k8s.io"
	for _, verb := range []string{"get", "list", "watch"} {
		if !can(t, on, verb, disc, "endpointslices", on) {
			t.Errorf("enabled: cannot %s endpointslices in its own namespace", verb)
		}
		if can(t, on, verb, disc, "endpointslices", elsewhere) {
			t.Errorf("enabled: can %s endpointslices in another namespace", verb)
		}
		if can(t, on, verb, disc, "endpointslices", "") {
			t.Errorf("enabled: can %s endpointslices cluster-wide", verb)
		}
		if can(t, off, verb, disc, "endpointslices", off) {
			t.Errorf("disabled: can %s endpointslices", verb)
		}
	}
	for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
		if can(t, on, verb, disc, "endpointslices", on) {
			t.Errorf("enabled: can %s endpointslices", verb)
		}
	}
	for _, r := range []struct{ verb, group, resource string }{
		{"get", "", "secrets"}, {"list", "", "secrets"}, {"list", "", "pods"}, {"get", "", "pods"},
		{"list", "", "endpoints"}, {"list", "", "services"}, {"create", "authentication.k8s.io", "tokenreviews"},
	} {
		if can(t, on, r.verb, r.group, r.resource, on) {
			t.Errorf("enabled: can %s %s", r.verb, r.resource)
		}
	}
}
