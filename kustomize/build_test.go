package kustomize_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
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
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../base\n"
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
		k += "namePrefix: " + prefix + "\n"
	}
	objs, err := render.KustomizeOverlay(fmt.Sprintf("user-%s-%s-%s", namespace, prefix, strings.Join(components, "-")), k)
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

var peerRule = []rbacv1.PolicyRule{{
	APIGroups: []string{"discovery.k8s.io"},
	Resources: []string{"endpointslices"},
	Verbs:     []string{"get", "list", "watch"},
}}

func TestOverlays(t *testing.T) {
	tests := []struct {
		dir      string
		enabled  bool
		wantArgs []string
	}{
		{"/kustomize/overlays/default", false, []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:8081"}},
		{"/kustomize/base", false, []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:8081"}},
		{"/kustomize/overlays/peer-discovery", true, []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:8081",
			"--peer-sync-bind-address=:9005", "--enable-peer-discovery", "--epp-peer-service", "epp"}},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			objs := build(t, tc.dir)
			var keys []string
			for _, o := range objs {
				keys = append(keys, render.Key(o))
			}
			want := []string{"Deployment//epp", "PodDisruptionBudget//epp", "Service//epp", "ServiceAccount//epp"}
			if tc.enabled {
				want = append(want, "Role//epp-peer-discovery", "RoleBinding//epp-peer-discovery")
			}
			slices.Sort(want)
			slices.Sort(keys)
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Fatalf("objects (-want +got):\n%s", diff)
			}
			if tc.enabled {
				if diff := cmp.Diff(peerRule, one[*rbacv1.Role](t, objs).Rules); diff != "" {
					t.Fatalf("Role rules (-want +got):\n%s", diff)
				}
			}
			if n := len(find[*rbacv1.ClusterRole](t, objs)) + len(find[*rbacv1.ClusterRoleBinding](t, objs)); n != 0 {
				t.Fatalf("%d cluster-scoped RBAC objects", n)
			}
			pod := one[*appsv1.Deployment](t, objs).Spec.Template.Spec
			c := pod.Containers[0]
			if diff := cmp.Diff(tc.wantArgs, c.Args); diff != "" {
				t.Fatalf("args (-want +got):\n%s", diff)
			}
			var env []string
			for _, e := range c.Env {
				env = append(env, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
			}
			if diff := cmp.Diff([]string{"POD_IP=status.podIP", "POD_IPS=status.podIPs", "POD_NAME=metadata.name", "NAMESPACE=metadata.namespace"}, env); diff != "" {
				t.Fatalf("env (-want +got):\n%s", diff)
			}
			hasPeerPort := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "peer-sync" && p.ContainerPort == 9005 })
			svc := one[*corev1.Service](t, objs)
			svcPeerPort := slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Name == "peer-sync" && p.Port == 9005 && p.TargetPort.StrVal == "peer-sync"
			})
			if hasPeerPort != tc.enabled || svcPeerPort != tc.enabled {
				t.Fatalf("peer-sync port on container %v, on Service %v; want %v", hasPeerPort, svcPeerPort, tc.enabled)
			}
			if *pod.AutomountServiceAccountToken != tc.enabled {
				t.Fatalf("automountServiceAccountToken %v, want %v", *pod.AutomountServiceAccountToken, tc.enabled)
			}
		})
	}
}

// TestNamePrefixAndNamespace: under an overlay's namePrefix and namespace, the flag
// still names the (renamed) Service and the RoleBinding the (renamed) ServiceAccount.
func TestNamePrefixAndNamespace(t *testing.T) {
	objs := userOverlay(t, "team-a", "router-", "peer-discovery")
	svc := one[*corev1.Service](t, objs)
	if svc.Name != "router-epp" || svc.Namespace != "team-a" {
		t.Fatalf("Service %s/%s", svc.Namespace, svc.Name)
	}
	dep := one[*appsv1.Deployment](t, objs)
	args := dep.Spec.Template.Spec.Containers[0].Args
	i := slices.Index(args, "--epp-peer-service")
	if i < 0 || i+1 >= len(args) || args[i+1] != svc.Name {
		t.Fatalf("args %v: --epp-peer-service must name the Service %q", args, svc.Name)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "router-epp" {
		t.Fatalf("serviceAccountName %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
	role := one[*rbacv1.Role](t, objs)
	rb := one[*rbacv1.RoleBinding](t, objs)
	if role.Name != "router-epp-peer-discovery" || role.Namespace != "team-a" {
		t.Fatalf("Role %s/%s", role.Namespace, role.Name)
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
	// A suffix too.
	objs, err := render.KustomizeOverlay("suffix", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/peer-discovery]\nnameSuffix: -blue\n")
	if err != nil {
		t.Fatal(err)
	}
	args = one[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0].Args
	if got := args[slices.Index(args, "--epp-peer-service")+1]; got != "epp-blue" {
		t.Fatalf("with nameSuffix -blue the flag names %q", got)
	}
}
