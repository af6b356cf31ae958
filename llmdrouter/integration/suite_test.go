// Package integration_test runs the EPP build of this module (cmd/epp: upstream's
// runner with peer discovery and the cross-replica syncer) as processes against a
// real kube-apiserver and etcd, as replicas of one EPP, and checks what an operator
// relies on: each replica's peer set is exactly the other replicas, and follows the
// EndpointSlice; requests held open through one replica count as in-flight load on
// every replica, and steer the others' picks.
//
// The suite runs in a network namespace of its own (package netns): the replicas
// have addresses in 198.18.0.0/24 on its loopback, which EndpointSlices accept.
package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv(asThirdPartyEPP) == "1" {
		os.Exit(thirdPartyEPPMain()) // a replica of TestRealEPPStartsAThirdPartyPeerDiscovery
	}
	// A network namespace of its own: replicas that sync state dial each other on
	// addresses an EndpointSlice accepts, and nothing leaves the machine.
	netns.Isolate("llm-d-router EPP integration tests")
	testenv.Main(m, "llm-d-router EPP integration tests", func(e *testenv.Env) { env = e }, removeBuilt)
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
	builtDir  string
)

// eppBinary is the EPP build: $EPP_LLMD_BIN (make builds it), else built here once
// (go build ./cmd/epp in this module, with the go.work of $GOWORK that substitutes
// the pinned upstream tree on machines without the module proxy's copy).
func eppBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("EPP_LLMD_BIN"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "epp-llmd-")
		if err != nil {
			buildErr = err
			return
		}
		builtDir = dir
		built = filepath.Join(dir, "epp")
		cmd := exec.Command("go", "build", "-trimpath", "-o", built, "./cmd/epp")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/epp (set GOWORK to the go.work that make llmdrouter-work writes): %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func removeBuilt() {
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
}
