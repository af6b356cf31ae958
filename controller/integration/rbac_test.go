package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// peerRole is the Role docs/DEPLOY.md gives: exactly get, list, watch on endpointslices.
func peerRole(ns string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "epp-peer-discovery", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"discovery.k8s.io"},
			Resources: []string{"endpointslices"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
}

// TestRBACLeastPrivilege runs the app with a real ServiceAccount token. Without the
// RoleBinding it is not ready, logs and counts an error naming endpointslices; once
// the binding exists it becomes ready and follows slices, without a restart.
func TestRBACLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "rbac", nil)
	if err != nil {
		t.Fatal(err)
	}
	saConfig, err := env.ServiceAccountConfig(ctx, ns, "epp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.RbacV1().Roles(ns).Create(ctx, peerRole(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	forbiddenBefore := testutil.ToFloat64(metrics.For(peers.SourceEndpointSlice).Errors(metrics.ReasonForbidden))
	a := startApp(t, saConfig, []string{"--enable-peer-discovery", "--epp-peer-service=epp"}, selfEnv(ns))

	// Not ready, with the missing permission in readyz, logs and the metric.
	wait.For(t, 20*time.Second, func() string {
		if testutil.ToFloat64(metrics.For(peers.SourceEndpointSlice).Errors(metrics.ReasonForbidden)) <= forbiddenBefore {
			return "no forbidden error counted yet"
		}
		return ""
	})
	code, body := get(t, a.ProbeAddr(), "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "endpointslices") || !strings.Contains(body, "forbidden") {
		t.Fatalf("readyz without RBAC: %d %q, want 503 naming endpointslices", code, body)
	}
	if logs := a.logs.String(); !strings.Contains(logs, "missing RBAC") || !strings.Contains(logs, "endpointslices") {
		t.Fatalf("logs do not name the missing permission:\n%s", logs)
	}
	_, m := get(t, a.MetricsAddr(), "/metrics")
	if !strings.Contains(m, `epp_peer_discovery_errors_total{discovery="endpointslice",reason="forbidden"}`) || !strings.Contains(m, `epp_peer_discovery_synced{discovery="endpointslice"} 0`) {
		t.Fatalf("/metrics without RBAC lacks the forbidden count or synced 0")
	}
	if doc, err := debugPeers(t, a.MetricsAddr()); err != nil || doc.Synced == nil || *doc.Synced || len(doc.Peers) != 0 {
		t.Fatalf("/debug/peers without RBAC: %+v %v", doc, err)
	}

	// Grant the Role: ready, peers, no restart.
	granted := time.Now()
	if _, err := env.Clientset.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "epp-peer-discovery", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "epp-peer-discovery"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "epp", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, func() string {
		if code, body := get(t, a.ProbeAddr(), "/readyz"); code != http.StatusOK {
			return fmt.Sprintf("readyz %d %s", code, body)
		}
		return ""
	})
	t.Logf("ready %s after the RoleBinding was created", time.Since(granted).Round(time.Millisecond))
	wait.For(t, 10*time.Second, func() string {
		if got := peerIDs(a.Store.Peers()); strings.Join(got, ",") != ns+"/epp-1@10.0.0.2:9005" {
			return fmt.Sprintf("peers %v", got)
		}
		return ""
	})
	// The watch works with the Role alone: a new slice arrives.
	s2 := slicegen.Slice("epp-b", slicegen.Namespace(ns), slicegen.Pod("epp-2", "10.0.0.3"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() string {
		if n := len(a.Store.Peers()); n != 2 {
			return fmt.Sprintf("%d peers after a new slice, want 2", n)
		}
		return ""
	})
}
