// Package integration_test runs the production wiring of epp (app.Parse, app.New,
// app.Run, and the bin/epp binary) against a real kube-apiserver and etcd.
package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, "integration tests", func(e *testenv.Env) { env = e }, testenv.RemoveBuilt)
}

type running struct {
	*app.App
	logs *capture.Buffer
}

// startApp parses args and env exactly as main does, builds the app with restConfig
// and runs it until the test ends.
func startApp(t *testing.T, restConfig *rest.Config, args []string, envVars map[string]string) running {
	t.Helper()
	args = append([]string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, args...)
	var stderr bytes.Buffer
	opts, err := app.Parse(args, func(k string) string { return envVars[k] }, &stderr)
	if err != nil {
		t.Fatalf("Parse(%v): %v", args, err)
	}
	logs := &capture.Buffer{}
	a, err := app.New(opts, restConfig, logs.Logger())
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("app.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("app did not stop within 30s of its context ending")
		}
		if t.Failed() {
			t.Logf("app logs:\n%s", logs.String())
		}
	})
	return running{App: a, logs: logs}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// get fetches http://addr/path (addr is always 127.0.0.1) and returns status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("refusing to send a request to %s: tests talk to 127.0.0.1 only", addr)
	}
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// debugPeers reads /debug/peers at addr (127.0.0.1 only).
func debugPeers(t *testing.T, addr string) (peers.Document, error) {
	t.Helper()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("refusing to send a request to %s: tests talk to 127.0.0.1 only", addr)
	}
	doc, _, err := peerdoc.Get(addr)
	return doc, err
}

// peerIDs formats peers as "id@address:port" for readable comparisons.
func peerIDs(ps []peers.PeerMetadata) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s@%s", p.ID(), p.HostPort()))
	}
	return out
}
