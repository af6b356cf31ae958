package integration_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
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

// TestAFreshModuleUsesThePlugin: what a user does, against a module proxy that
// serves what make release tags (the root module and llmdrouter/ zipped from the
// repository's git content at the tags, upstream from the pinned tarball; every
// other module from this machine's module cache): a module of their own, with no
// replace, gets llmdrouter@vX.Y.Z and builds the README's EPP main and a program
// that registers the plugin and drives it through upstream's contract. The go.sum
// lines the user's go command computed for upstream, and for every module that
// llmdrouter/go.sum also lists, are llmdrouter/go.sum's. The program then fills
// upstream's MemoryPeerStore from a real API server.
func TestAFreshModuleUsesThePlugin(t *testing.T) {
	root := repoRoot(t)
	version := releaseVersion(t, root)
	repo := snapshot(t, root)
	if out, err := release(repo, version); err != nil {
		t.Fatalf("make release VERSION=%s on the working tree: %v\n%s", version, err, out)
	}
	proxy := releasedProxy(t, root, repo, version)

	dir := t.TempDir()
	mod := "module example.com/myepp\n\ngo " + goVersion(t, root) + "\n"
	for name, content := range map[string]string{"go.mod": mod, "main.go": freshMain, "cmd/epp/main.go": readmeEPPMain(t, root)} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A user's machine: an empty module cache; modules from the proxy (ours first,
	// then this machine's module cache as a proxy: the test runs in a network
	// namespace with no way out). No checksum database is reachable here, so go.sum
	// is checked below against llmdrouter/go.sum.
	goEnv := []string{"GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-mod=mod -modcacherw -trimpath", "GOTOOLCHAIN=local",
		"GOPROXY=file://" + proxy + ",file://" + machineCache(t), "GOSUMDB=off", "GOMODCACHE=" + filepath.Join(dir, "modcache")}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"GOWORK", "CGO_ENABLED", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOMODCACHE", "GOINSECURE"}, name) {
			goEnv = append(goEnv, kv)
		}
	}
	bin := filepath.Join(dir, "myepp")
	for _, args := range [][]string{
		{"get", nestedModule + "@v" + version},
		{"build", "-o", bin, "."},
		{"build", "-o", filepath.Join(dir, "epp"), "./cmd/epp"}, // the README's EPP main
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, goEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in a fresh module: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(gomod), "replace") || !strings.Contains(string(gomod), nestedModule+" v"+version) {
		t.Fatalf("the fresh module's go.mod after go get:\n%s", gomod)
	}
	checkSums(t, filepath.Join(dir, "go.sum"), filepath.Join(root, "llmdrouter", "go.sum"), upstreamVersion(t, root))

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
	prog := exec.CommandContext(runCtx, bin, `{"service": "epp"}`)
	prog.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "KUBECONFIG=" + kubeconfig, "POD_NAME=epp-0", "POD_IP=10.0.0.1", "NAMESPACE=" + ns}
	out, err := prog.CombinedOutput()
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

// goVersion is the go line of llmdrouter/go.mod.
func goVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "llmdrouter", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go" {
			return f[1]
		}
	}
	t.Fatal("llmdrouter/go.mod has no go line")
	return ""
}

// readmeEPPMain is the README's EPP main: its one Go block that is a main package
// and calls wiring.Run.
func readmeEPPMain(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var mains []string
	for _, block := range markdown.CodeBlocks(string(b), "go") {
		if strings.HasPrefix(block, "package main\n") && strings.Contains(block, "wiring.Run(") {
			mains = append(mains, block)
		}
	}
	if len(mains) != 1 {
		t.Fatalf("README.md has %d Go blocks that are an EPP main (package main, with its imports, calling wiring.Run), want 1", len(mains))
	}
	return mains[0]
}

// checkSums: the user's go.sum holds upstream's two lines, and every line of it for a
// module version that llmdrouter/go.sum also lists is llmdrouter/go.sum's line.
func checkSums(t *testing.T, userSum, moduleSum, upstream string) {
	t.Helper()
	read := func(file string) map[string]string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sums := map[string]string{}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) == 3 {
				sums[f[0]+" "+f[1]] = f[2]
			}
		}
		return sums
	}
	user, ours := read(userSum), read(moduleSum)
	for _, key := range []string{upstreamMod + " " + upstream, upstreamMod + " " + upstream + "/go.mod"} {
		if user[key] == "" || ours[key] == "" {
			t.Errorf("go.sum line %s: the user's go command wrote %q, llmdrouter/go.sum has %q", key, user[key], ours[key])
		}
	}
	compared := 0
	for key, h := range user {
		if o, ok := ours[key]; ok {
			compared++
			if o != h {
				t.Errorf("%s: the user's go command computed %s, llmdrouter/go.sum says %s", key, h, o)
			}
		}
	}
	t.Logf("%d go.sum lines of the user's module checked against llmdrouter/go.sum (upstream's among them)", compared)
}
