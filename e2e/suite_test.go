//go:build e2e

package e2e_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/localcluster"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// The suite's environment, set up by TestMain.
var (
	backend     string // "local" or "kind"
	kubeconfig  string
	kubeContext string // "" = the kubeconfig's current context
	clientset   *kubernetes.Clientset
	repoRoot    string
	eppBin      string
	local       *localcluster.Cluster
)

// convergence records how long each step took to converge, for the summary.
var convergence struct {
	sync.Mutex
	lines []string
}

func record(format string, a ...any) {
	convergence.Lock()
	defer convergence.Unlock()
	convergence.lines = append(convergence.lines, fmt.Sprintf(format, a...))
}

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if repoRoot, err = testenv.RepoRoot(); err != nil {
		return 0, err
	}
	eppBin = filepath.Join(repoRoot, "bin", "epp")
	// terratest runs helm and kubectl from PATH: the ones built into bin/ come first.
	os.Setenv("PATH", filepath.Join(repoRoot, "bin")+string(os.PathListSeparator)+filepath.Join(repoRoot, "bin", "k8s")+string(os.PathListSeparator)+os.Getenv("PATH"))
	os.Setenv("HELM_CACHE_HOME", filepath.Join(os.TempDir(), "epp-e2e-helm-cache"))
	os.Setenv("HELM_CONFIG_HOME", filepath.Join(os.TempDir(), "epp-e2e-helm-config"))
	os.Setenv("HELM_DATA_HOME", filepath.Join(os.TempDir(), "epp-e2e-helm-data"))

	var cleanup func()
	backend = os.Getenv("E2E_BACKEND")
	switch backend {
	case "", "local":
		backend = "local"
		if _, err := os.Stat(eppBin); err != nil {
			return 0, fmt.Errorf("%s not found: run `make build` (make e2e-local does it)", eppBin)
		}
		bins, err := localcluster.DefaultBinaries()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		local, err = localcluster.Start(context.Background(), bins, os.Stderr)
		if local != nil {
			cleanup = local.Stop
		}
		if err != nil {
			if cleanup != nil {
				fmt.Fprint(os.Stderr, local.Logs(30))
				cleanup()
			}
			return 0, err
		}
		fmt.Fprintf(os.Stderr, "e2e: local control plane up in %s\n", time.Since(start).Round(time.Millisecond))
		kubeconfig = local.Kubeconfig
	case "kind":
		kubeconfig = os.Getenv("E2E_KUBECONFIG")
		kubeContext = os.Getenv("E2E_KUBE_CONTEXT")
		if kubeconfig == "" || kubeContext == "" {
			return 0, fmt.Errorf("E2E_BACKEND=kind needs E2E_KUBECONFIG and E2E_KUBE_CONTEXT (make e2e-kind sets them)")
		}
		cleanup = func() {}
	default:
		return 0, fmt.Errorf("E2E_BACKEND=%q: want local or kind", backend)
	}
	var once sync.Once
	stop := func() { once.Do(cleanup) }
	defer stop()

	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return 0, err
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return 0, err
	}
	// llm-d-router's EPP checks a token on /metrics (the chart's default, as
	// upstream's): the suite reads metrics as a ServiceAccount allowed only that.
	unread, err := peerview.ReadMetricsAs(context.Background(), clientset)
	defer unread()
	if err != nil {
		return 0, fmt.Errorf("a metrics reader: %w", err)
	}

	// Stop everything the suite started on Ctrl-C, and before go test's own timeout
	// kills the process without running deferred functions.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "e2e: %v: stopping everything the suite started\n", s)
		stop()
		os.Exit(1)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 2*time.Minute {
			time.AfterFunc(d-time.Minute, func() {
				fmt.Fprintf(os.Stderr, "e2e: one minute before the %s test timeout: stopping everything the suite started\n", d)
				stop()
				os.Exit(1)
			})
		}
	}

	code := m.Run()
	convergence.Lock()
	sort.Strings(convergence.lines)
	if len(convergence.lines) > 0 {
		fmt.Fprintf(os.Stderr, "\ne2e convergence on the %s backend (time from the change until every replica's /debug/peers lists exactly the other replicas):\n  %s\n",
			backend, strings.Join(convergence.lines, "\n  "))
	}
	convergence.Unlock()
	propagation.Lock()
	if h := propagation.h; h.Count() > 0 {
		fmt.Fprintf(os.Stderr, "\ne2e propagation delay on the %s backend (endpoints.kubernetes.io/last-change-trigger-time -> published, epp_peer_discovery_propagation_delay_seconds of the replicas alive at the end of each case): n=%.0f p50=%.3fs p90=%.3fs p99=%.3fs\n",
			backend, h.Count(), h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99))
	} else {
		fmt.Fprintf(os.Stderr, "\ne2e propagation delay on the %s backend: no observations\n", backend)
	}
	propagation.Unlock()
	return code, nil
}
