package testenv

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Leftovers lists what an installation may leave in namespace ns after its uninstall:
// Deployments, ReplicaSets, Pods, Services, EndpointSlices, Roles, RoleBindings,
// PodDisruptionBudgets, Secrets (Helm's release records) and ServiceAccounts other than
// "default". It returns one entry per kind that is not empty (or could not be listed);
// nil means the namespace is clean.
func Leftovers(ctx context.Context, cs kubernetes.Interface, ns string) []string {
	var left []string
	count := func(kind string, n int, err error) {
		if err != nil {
			left = append(left, kind+": "+err.Error())
		} else if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, kind))
		}
	}
	opts := metav1.ListOptions{}
	if l, err := cs.AppsV1().Deployments(ns).List(ctx, opts); err != nil {
		count("deployments", 0, err)
	} else {
		count("deployments", len(l.Items), nil)
	}
	if l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, opts); err != nil {
		count("replicasets", 0, err)
	} else {
		count("replicasets", len(l.Items), nil)
	}
	if l, err := cs.CoreV1().Pods(ns).List(ctx, opts); err != nil {
		count("pods", 0, err)
	} else {
		// A pod being deleted is going: it is gone when its grace period ends
		// (llm-d-router's EPP drains for 30 s after SIGTERM).
		n := 0
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				n++
			}
		}
		count("pods", n, nil)
	}
	if l, err := cs.CoreV1().Services(ns).List(ctx, opts); err != nil {
		count("services", 0, err)
	} else {
		count("services", len(l.Items), nil)
	}
	if l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, opts); err != nil {
		count("endpointslices", 0, err)
	} else {
		count("endpointslices", len(l.Items), nil)
	}
	if l, err := cs.RbacV1().Roles(ns).List(ctx, opts); err != nil {
		count("roles", 0, err)
	} else {
		count("roles", len(l.Items), nil)
	}
	if l, err := cs.RbacV1().RoleBindings(ns).List(ctx, opts); err != nil {
		count("rolebindings", 0, err)
	} else {
		count("rolebindings", len(l.Items), nil)
	}
	if l, err := cs.PolicyV1().PodDisruptionBudgets(ns).List(ctx, opts); err != nil {
		count("poddisruptionbudgets", 0, err)
	} else {
		count("poddisruptionbudgets", len(l.Items), nil)
	}
	if l, err := cs.CoreV1().Secrets(ns).List(ctx, opts); err != nil {
		count("secrets", 0, err)
	} else {
		count("secrets (Helm release records)", len(l.Items), nil)
	}
	if l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, opts); err != nil {
		count("serviceaccounts", 0, err)
	} else {
		n := 0
		for _, a := range l.Items {
			if a.Name != "default" {
				n++
			}
		}
		count("serviceaccounts besides default", n, nil)
	}
	return left
}
