// Package faults_test injects faults between epp and a real kube-apiserver (a TCP
// proxy that refuses, resets, black-holes or diverts connections; the API server
// stopped and restarted on the same address and certificates; a Role removed) and
// asserts what an operator relies on: the view turns stale within 10 s and says why,
// no peer ever vanishes during the fault, and after the fault a change reaches
// /debug/peers within 5 s.
package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

var (
	env *envtest.Environment
	// admin is a cluster-admin ServiceAccount's token config: it survives an API
	// server restart (the client certificates of envtest's admin do not).
	admin   *rest.Config
	adminCS *kubernetes.Clientset
	// certDir holds the API server's serving certificate and key, and its
	// ServiceAccount signing key, kept across restarts.
	certDir string
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fault tests: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return 0, fmt.Errorf("fault tests need a real API server: %w", err)
	}
	if certDir, err = os.MkdirTemp("", "epp-faults-certs-"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(certDir)
	defer testenv.RemoveBuilt()
	env = &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute}
	// A CertDir of our own makes the API server restartable on the same address with
	// the same serving certificate and ServiceAccount keys.
	env.ControlPlane.GetAPIServer().CertDir = certDir
	cfg, err := env.Start()
	if err != nil {
		return 0, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	if admin, err = clusterAdminToken(cfg); err != nil {
		return 0, err
	}
	if adminCS, err = kubernetes.NewForConfig(admin); err != nil {
		return 0, err
	}
	code := m.Run()
	figures.Lock()
	if len(figures.lines) > 0 {
		fmt.Fprintf(os.Stderr, "\nfault figures (from the fault to /debug/peers stale; from its end to fresh and to a change made then being listed):\n  %s\n",
			strings.Join(figures.lines, "\n  "))
	}
	figures.Unlock()
	return code, nil
}

// testenvOf offers testenv's helpers with the admin token.
func testenvOf() *testenv.Env { return &testenv.Env{Config: admin, Clientset: adminCS} }

// clusterAdminToken creates a ServiceAccount bound to cluster-admin and returns a
// config with a token for it.
func clusterAdminToken(cfg *rest.Config) (*rest.Config, error) {
	e := &testenv.Env{Config: cfg}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	e.Clientset = cs
	ctx := context.Background()
	sa, err := e.ServiceAccountConfig(ctx, "kube-system", "faults-admin")
	if err != nil {
		return nil, err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "faults-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "faults-admin", Namespace: "kube-system"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return sa, nil
}

// servingCert is the API server's serving certificate and key (for a server that
// answers like it, with errors).
func servingCert() (certFile, keyFile string) {
	return filepath.Join(certDir, "apiserver.crt"), filepath.Join(certDir, "apiserver.key")
}
