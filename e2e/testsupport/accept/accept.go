// Package accept checks rendered manifests against a real API server the way a
// cluster with the restricted pod security level would treat them.
package accept

import (
	"context"
	"fmt"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// Warnings collects the API server's warnings (pod security "warn" mode among them).
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Take returns and clears the warnings seen so far.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// Client is an admin client whose warnings land in the returned collector.
func Client(t testing.TB, env *testenv.Env) (client.Client, *Warnings) {
	t.Helper()
	w := &Warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// RestrictedNamespace creates a namespace that enforces, warns and audits the
// restricted pod security level.
func RestrictedNamespace(t testing.TB, env *testenv.Env, prefix string) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), prefix, testenv.RestrictedPodSecurity())
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Create creates every object for real, with strict field validation.
func Create(t testing.TB, c client.Client, objs []client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o.DeepCopyObject().(client.Object), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("creating %s: %v", render.Key(o), err)
		}
	}
}

// Restricted proves that objs, all in namespace ns (which must enforce the restricted
// level), are accepted: a server-side dry run of each with strict field validation,
// a real create, and a dry-run Pod from every Deployment's template (pod security
// enforces on Pods, not on Deployments). Any API warning fails the test. Then it
// reads the selectors back (SelectPods).
func Restricted(t testing.TB, c client.Client, w *Warnings, objs []client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := c.Create(ctx, o.DeepCopyObject().(client.Object), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("server-side dry run of %s: %v", render.Key(o), err)
		}
	}
	Create(t, c, objs)
	for _, o := range objs {
		dep, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-probe", Namespace: dep.Namespace, Labels: dep.Spec.Template.Labels},
			Spec:       dep.Spec.Template.Spec,
		}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Fatalf("a Pod of Deployment %s's template is refused: %v", dep.Name, err)
		}
	}
	if ws := w.Take(); len(ws) > 0 {
		t.Fatalf("API server warnings: %v", ws)
	}
	SelectPods(t, c, objs)
}

// SelectPods reads every PodDisruptionBudget, Service and NetworkPolicy of objs back
// from the API server (as stored, not as rendered) and fails unless its selector
// selects the pods of the Deployment among objs. A PodDisruptionBudget without a
// selector (stored as null) protects no pod at all; a Service or policy that selects
// nothing reaches no pod.
func SelectPods(t testing.TB, c client.Client, objs []client.Object) {
	t.Helper()
	ctx := context.Background()
	var pods labels.Set
	for _, o := range objs {
		if dep, ok := o.(*appsv1.Deployment); ok {
			pods = dep.Spec.Template.Labels
		}
	}
	if pods == nil {
		t.Fatal("no Deployment among the objects: nothing to select")
	}
	check := func(kind, name string, sel *metav1.LabelSelector) {
		t.Helper()
		if sel == nil {
			t.Fatalf("%s %s, read back from the API server, has no selector: it selects no pod", kind, name)
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("%s %s: selector %v: %v", kind, name, sel, err)
		}
		if s.Empty() || !s.Matches(pods) {
			t.Fatalf("%s %s, read back from the API server, selects %q: not the Deployment's pods %v", kind, name, s, pods)
		}
	}
	for _, o := range objs {
		key := client.ObjectKeyFromObject(o)
		switch o.(type) {
		case *policyv1.PodDisruptionBudget:
			var got policyv1.PodDisruptionBudget
			if err := c.Get(ctx, key, &got); err != nil {
				t.Fatal(err)
			}
			check("PodDisruptionBudget", got.Name, got.Spec.Selector)
		case *corev1.Service:
			var got corev1.Service
			if err := c.Get(ctx, key, &got); err != nil {
				t.Fatal(err)
			}
			check("Service", got.Name, &metav1.LabelSelector{MatchLabels: got.Spec.Selector})
		case *networkingv1.NetworkPolicy:
			var got networkingv1.NetworkPolicy
			if err := c.Get(ctx, key, &got); err != nil {
				t.Fatal(err)
			}
			check("NetworkPolicy", got.Name, &got.Spec.PodSelector)
		}
	}
}

// Can asks the API server whether ServiceAccount saNamespace/saName may do verb on
// group/resource in namespace ("" = cluster-wide), with a SubjectAccessReview.
func Can(t testing.TB, env *testenv.Env, saNamespace, saName, verb, group, resource, namespace string) bool {
	t.Helper()
	allowed, err := env.Can(context.Background(), fmt.Sprintf("system:serviceaccount:%s:%s", saNamespace, saName),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
		verb, group, resource, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return allowed
}
