// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) from the binaries that `make k8s` builds into bin/k8s, and offers the
// helpers the integration tests share: namespaces, ServiceAccount tokens, kubeconfigs.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running API server.
type Env struct {
	env *envtest.Environment
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Clientset talks to the API server as admin.
	Clientset *kubernetes.Clientset
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string
	dir        string
}

const modulePath = "github.com/epp-peer-discovery/epp-peer-discovery"

// RepoRoot returns the folder that holds the module's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of the project not found above the working directory")
		}
		dir = parent
	}
}

// KubeVersion is a Kubernetes release version.
type KubeVersion struct{ Major, Minor, Patch int }

func (v KubeVersion) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// KubernetesVersion is the Kubernetes version of the control plane the tests run:
// the k8s.io/kubernetes requirement of hack/k8s/go.mod, the one place it is set.
func KubernetesVersion() (KubeVersion, error) {
	root, err := RepoRoot()
	if err != nil {
		return KubeVersion{}, err
	}
	b, err := os.ReadFile(filepath.Join(root, "hack", "k8s", "go.mod"))
	if err != nil {
		return KubeVersion{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			var v KubeVersion
			if _, err := fmt.Sscanf(f[1], "v%d.%d.%d", &v.Major, &v.Minor, &v.Patch); err != nil {
				return v, fmt.Errorf("hack/k8s/go.mod: k8s.io/kubernetes %s: %w", f[1], err)
			}
			return v, nil
		}
	}
	return KubeVersion{}, errors.New("hack/k8s/go.mod has no k8s.io/kubernetes requirement")
}

// AssetsDir is KUBEBUILDER_ASSETS, else <repo>/bin/k8s, checked to hold etcd and
// kube-apiserver. The error says how to get them.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "k8s")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make k8s` (make test does it) to build the control plane from the Go module proxy, or set KUBEBUILDER_ASSETS", b, dir)
		}
	}
	return dir, nil
}

// Option changes how Start starts the control plane.
type Option func(*envtest.Environment)

// WithoutFsync runs etcd with --unsafe-no-fsync: writes do not wait for the disk,
// which takes the disk's jitter out of benchmarks. Never for data that matters.
func WithoutFsync() Option {
	return func(e *envtest.Environment) {
		e.ControlPlane.Etcd = &envtest.Etcd{}
		e.ControlPlane.Etcd.Configure().Append("unsafe-no-fsync", "true")
	}
}

// WithAPIServerFlag sets a kube-apiserver flag, e.g. ("watch-cache-sizes",
// "endpointslices.discovery.k8s.io#0") to serve the watches of EndpointSlices from
// etcd, where a compaction expires old resourceVersions.
func WithAPIServerFlag(name, value string) Option {
	return func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
}

// EtcdURL is the client URL of the environment's etcd (plain HTTP on 127.0.0.1).
func (e *Env) EtcdURL() string {
	if e.env == nil || e.env.ControlPlane.Etcd == nil || e.env.ControlPlane.Etcd.URL == nil {
		return ""
	}
	return e.env.ControlPlane.Etcd.URL.String()
}

// Start starts etcd and kube-apiserver. Call Stop when done, also on failure.
func Start(opts ...Option) (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	e := &Env{env: &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute}}
	for _, o := range opts {
		o(e.env)
	}
	if e.Config, err = e.env.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	if e.Clientset, err = kubernetes.NewForConfig(e.Config); err != nil {
		e.Stop()
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", "epp-testenv-"); err != nil {
		e.Stop()
		return nil, err
	}
	e.Kubeconfig = filepath.Join(e.dir, "admin.kubeconfig")
	if err := WriteKubeconfig(e.Config, e.Kubeconfig); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops the API server and etcd and removes the temporary files.
func (e *Env) Stop() {
	if e.env != nil {
		_ = e.env.Stop()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// WriteKubeconfig writes a kubeconfig for cfg (client certificates or a token).
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// RestrictedPodSecurity are the labels of a namespace that enforces, warns of and
// audits the restricted pod security level: where the tests run the pods the
// project ships, so that a pod that would not pass it fails them.
func RestrictedPodSecurity() map[string]string {
	return map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}
}

// CreateNamespace creates a namespace with a generated name from prefix and labels.
func (e *Env) CreateNamespace(ctx context.Context, prefix string, labels map[string]string) (string, error) {
	ns, err := e.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return ns.Name, nil
}

// ServiceAccountConfig creates the ServiceAccount if needed and returns a client
// config that authenticates with a real token for it (TokenRequest API) and nothing
// else: no client certificate.
func (e *Env) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	_, err := e.Clientset.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	tr, err := e.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            e.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData},
		BearerToken:     tr.Status.Token,
		QPS:             50,
		Burst:           100,
	}, nil
}

// Can runs a SubjectAccessReview: may user (in groups) do verb on group/resource in
// namespace ("" = cluster-wide)?
func (e *Env) Can(ctx context.Context, user string, groups []string, verb, group, resource, namespace string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: group, Resource: resource,
		},
	}}
	res, err := e.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}

// Main is a TestMain for suites that need the API server: it starts it (failing the
// run with a message that says how to get the binaries), hands it to set, runs the
// tests, then stops it and runs after.
func Main(m *testing.M, suite string, set func(*Env), after ...func()) {
	e, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s need a real API server: %v\n", suite, err)
		os.Exit(1)
	}
	set(e)
	code := m.Run()
	e.Stop()
	for _, f := range after {
		f()
	}
	os.Exit(code)
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort("127.0.0.1")))
}

// FreePort returns a TCP port of ip that was free a moment ago.
func FreePort(ip string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var (
	buildOnce sync.Once
	builtEpp  string
	buildErr  error
)

// BuildEpp builds the epp binary the way `make build` does, once per test binary,
// into a temporary folder that RemoveBuilt deletes.
func BuildEpp() (string, error) {
	buildOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "epp-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtEpp = filepath.Join(dir, "epp")
		cmd := exec.Command("go", "build", "-trimpath", "-o", builtEpp, "./controller/cmd/epp")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./controller/cmd/epp: %w\n%s", err, out)
		}
	})
	return builtEpp, buildErr
}

// RemoveBuilt deletes what BuildEpp built.
func RemoveBuilt() {
	if builtEpp != "" {
		_ = os.RemoveAll(filepath.Dir(builtEpp))
	}
}
