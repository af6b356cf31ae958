package integration_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// freshMain is a program of a user's own module: it registers this module's
// plugins, builds one through upstream's registry as the EPP's loader does, and
// drives it through upstream's contract only, into upstream's MemoryPeerStore.
const freshMain = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter"
)

func main() {
	llmdrouter.Register()
	p, err := fwkplugin.Registry["endpointslice-peer-discovery"]("peers", json.NewDecoder(strings.NewReader(os.Args[1])), nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	pd := p.(fwkdl.PeerDiscovery)
	store := statesync.NewMemoryPeerStore()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _ = pd.Start(ctx, fwkdl.NewPeerNotifier(store)) }()
	select {
	case <-pd.Ready():
	case <-ctx.Done():
		fmt.Println("error: not ready")
		os.Exit(1)
	}
	for _, peer := range store.Peers() {
		fmt.Printf("peer %s %s:%s\n", peer.ID, peer.Address, peer.Port)
	}
}
`

// upstreamTree is the upstream tree that $GOWORK substitutes ("" when the module
// proxy serves upstream and nothing is substituted).
func upstreamTree(t *testing.T) string {
	t.Helper()
	work := os.Getenv("GOWORK")
	if work == "" || work == "off" {
		t.Fatal("GOWORK is not set: run the tests with make test-llmdrouter, which writes the go.work that builds this module")
	}
	f, err := os.Open(work)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 5 && fields[0] == "replace" && fields[1] == "github.com/llm-d/llm-d-router" {
			return fields[4]
		}
	}
	return ""
}

// TestAFreshModuleUsesThePlugin: a module outside the repository that requires
// this one (with upstream substituted where the proxy does not serve it, as
// ../shared/upstream says) compiles, registers the plugin, and fills upstream's
// MemoryPeerStore from a real API server.
func TestAFreshModuleUsesThePlugin(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A release tags the root module and llmdrouter/ with one version, the one
	// llmdrouter/go.mod requires of the root (make set-version): a user requires that.
	version := rootVersion(t, root)
	dir := t.TempDir()
	mod := "module example.com/myepp\n\ngo 1.26.6\n\n" +
		"require github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter " + version + "\n\n" +
		"replace github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter => " + filepath.Join(root, "llmdrouter") + "\n\n" +
		"replace github.com/epp-peer-discovery/epp-peer-discovery => " + root + "\n"
	if tree := upstreamTree(t); tree != "" {
		mod += "\nreplace github.com/llm-d/llm-d-router v0.0.0-20260822034922-ebab687927f5 => " + tree + "\n"
	}
	sum, err := os.ReadFile(filepath.Join(root, "llmdrouter", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": []byte(freshMain)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What go get would add, from the module cache alone: the test runs in a network
	// namespace with no way out, and the cache holds what building llmdrouter took
	// (go mod tidy would also want the modules of the dependencies' own tests).
	goEnv := append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off")
	bin := filepath.Join(dir, "myepp")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = dir, goEnv
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a fresh module: %v\n%s", err, out)
	}

	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "fresh", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-abc", slicegen.Namespace(ns), slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	run := exec.CommandContext(runCtx, bin, `{"service": "epp"}`)
	run.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "KUBECONFIG=" + kubeconfig, "POD_NAME=epp-0", "POD_IP=10.0.0.1", "NAMESPACE=" + ns}
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the fresh module's program: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "peer ") {
			got = append(got, line)
		}
	}
	if want := "peer " + ns + "/epp-1 10.0.0.2:9005,peer " + ns + "/epp-2 10.0.0.3:9005"; strings.Join(got, ",") != want {
		t.Fatalf("upstream's MemoryPeerStore in a fresh module holds %v, want %s\n%s", got, want, out)
	}
}

// rootVersion is the version of the root module that llmdrouter/go.mod requires: a
// release's version, never a placeholder that only its replace makes resolvable.
func rootVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "llmdrouter", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "github.com/epp-peer-discovery/epp-peer-discovery" {
			if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(f[1]) {
				t.Fatalf("llmdrouter/go.mod requires the root module at %s: users' go get resolves only a released version (make set-version VERSION=x.y.z)", f[1])
			}
			return f[1]
		}
	}
	t.Fatal("llmdrouter/go.mod does not require the root module")
	return ""
}
