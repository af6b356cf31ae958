package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// buildEpp builds the epp binary the way `make build` does, once per test run.
func buildEpp(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BuildEpp()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func freeAddr(*testing.T) string { return testenv.FreeAddr() }

// minimalEnv is the environment of a process that has no kubeconfig anywhere.
func minimalEnv(t *testing.T, kv ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, kv...)
}

func TestBinaryRejectsInvalidFlags(t *testing.T) {
	bin := buildEpp(t)
	pod := []string{"POD_NAME=epp-0", "POD_IP=10.0.0.1", "NAMESPACE=ns"}
	tests := []struct {
		name string
		args []string
		env  []string
		want []string // substrings of the single stderr line
	}{
		{"enabled without a source", []string{"--enable-peer-discovery"}, pod, []string{"--epp-peer-service", "--epp-peer-file"}},
		{"both sources", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-file=/x"}, pod, []string{"--epp-peer-service", "--epp-peer-file"}},
		{"port out of range", []string{"--epp-peer-port=65536"}, pod, []string{"--epp-peer-port=65536"}},
		{"port zero", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-port=0"}, pod, []string{"--epp-peer-port=0"}},
		{"empty port name", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-port-name="}, pod, []string{"--epp-peer-port-name"}},
		{"invalid membership", []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-membership=leader"}, pod, []string{"--epp-peer-membership", "ready", "alive"}},
		{"unknown flag", []string{"--enable-peer-discovry"}, pod, []string{"enable-peer-discovry"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = minimalEnv(t, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v, want code 2; stderr: %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "epp: ") {
				t.Fatalf("stderr is not one 'epp: ' line: %q", stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("stderr %q does not name %q", lines[0], w)
				}
			}
		})
	}
}

// startBinary runs bin with args until the test ends, then stops it with SIGTERM and
// checks that it exited cleanly.
func startBinary(t *testing.T, bin string, args, env []string) *capture.Buffer {
	t.Helper()
	out, _ := startStoppableBinary(t, bin, args, env)
	return out
}

// startStoppableBinary runs bin (see proc.Start).
func startStoppableBinary(t *testing.T, bin string, args, env []string) (*capture.Buffer, func()) {
	t.Helper()
	return proc.Start(t, bin, args, env)
}

func TestBinaryServesPeers(t *testing.T) {
	bin := buildEpp(t)
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "binary", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns),
		slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	startBinary(t, bin, []string{
		"--enable-peer-discovery", "--epp-peer-service=epp", "--kubeconfig=" + env.Kubeconfig,
		"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr,
	}, minimalEnv(t, "POD_NAME=epp-0", "POD_IP=10.0.0.1", "NAMESPACE="+ns))

	wait.For(t, 20*time.Second, func() string {
		if code, body := get(t, probeAddr, "/readyz"); code != 200 {
			return fmt.Sprintf("readyz: %d %s", code, body)
		}
		return ""
	})
	doc, raw, err := peerdoc.Get(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range doc.Peers {
		got = append(got, fmt.Sprintf("%s %s/%s %s %d", p.ID, p.Namespace, p.Name, p.Address, p.Port))
	}
	want := []string{ns + "/epp-1 " + ns + "/epp-1 10.0.0.2 9005", ns + "/epp-2 " + ns + "/epp-2 10.0.0.3 9005"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("/debug/peers peers %q, want %q\n%s", got, want, raw)
	}
	if !doc.Enabled || doc.Source != "endpointslice" || doc.Synced == nil || !*doc.Synced || doc.Self == nil || doc.Self.Name != "epp-0" {
		t.Fatalf("/debug/peers: %s", raw)
	}
	for _, field := range []string{`"enabled": true`, `"source": "endpointslice"`, `"synced": true`, `"updatedAt": "`, `"id": "` + ns + `/epp-1"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("/debug/peers lacks %s:\n%s", field, raw)
		}
	}

	// Scale down: the binary follows.
	if err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "epp-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() string {
		doc, err := debugPeers(t, metricsAddr)
		if err != nil {
			return err.Error()
		}
		if len(doc.Peers) != 0 {
			return fmt.Sprintf("peers %+v after the slice was deleted", doc.Peers)
		}
		return ""
	})
}

// TestBinaryDisabledNeedsNoKubernetes runs epp with peer discovery off and no
// kubeconfig anywhere: it serves the disabled document and is ready.
func TestBinaryDisabledNeedsNoKubernetes(t *testing.T) {
	bin := buildEpp(t)
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	startBinary(t, bin, []string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr},
		minimalEnv(t))
	wait.For(t, 10*time.Second, func() string {
		if code, body := get(t, probeAddr, "/readyz"); code != 200 {
			return fmt.Sprintf("readyz: %d %s", code, body)
		}
		return ""
	})
	_, raw, err := peerdoc.Get(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if compact := strings.Join(strings.Fields(string(raw)), ""); compact != `{"enabled":false,"peers":[]}` {
		t.Fatalf("/debug/peers with peer discovery off = %s", raw)
	}
}

// TestBinaryFileSource runs epp without Kubernetes on a peers file: edits of the file
// show up in /debug/peers, a bad edit keeps the last good set, and a second epp reads
// the first one's snapshot as its peers file.
func TestBinaryFileSource(t *testing.T) {
	bin := buildEpp(t)
	dir := t.TempDir()
	peersPath, snapPath := filepath.Join(dir, "peers.yaml"), filepath.Join(dir, "snapshot.json")
	// Each edit replaces the file by a rename, as editors and ConfigMap updates do: an
	// in-place write (truncate, then write) can be read empty in between, which the
	// source rightly rejects too and would count as a second bad edit.
	writeFile := func(content string) {
		t.Helper()
		tmp := peersPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, peersPath); err != nil {
			t.Fatal(err)
		}
	}
	peersOf := func(addr string) string {
		doc, err := debugPeers(t, addr)
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, p := range doc.Peers {
			got = append(got, fmt.Sprintf("%s@%s:%d", p.ID, p.Address, p.Port))
		}
		return strings.Join(got, ",")
	}
	expect := func(addr, step, want string) {
		t.Helper()
		wait.For(t, 10*time.Second, func() string {
			if got := peersOf(addr); got != want {
				return fmt.Sprintf("%s: /debug/peers %q, want %q", step, got, want)
			}
			return ""
		})
	}

	writeFile("peers:\n- {name: epp-a, address: 192.0.2.1}\n- {name: epp-b, address: 192.0.2.2}\n")
	first, firstProbe := freeAddr(t), freeAddr(t)
	firstOut := startBinary(t, bin, []string{"--enable-peer-discovery", "--epp-peer-file=" + peersPath, "--epp-peer-snapshot-file=" + snapPath,
		"--metrics-bind-address=" + first, "--health-probe-bind-address=" + firstProbe},
		minimalEnv(t, "POD_NAME=epp-a", "NAMESPACE=edge"))
	expect(first, "start", "edge/epp-b@192.0.2.2:9005")
	if code, body := get(t, firstProbe, "/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}

	writeFile("peers:\n- {name: epp-a, address: 192.0.2.1}\n- {name: epp-b, address: 192.0.2.2}\n- {name: epp-c, address: '2001:db8::3', port: 7000}\n")
	expect(first, "edit", "edge/epp-b@192.0.2.2:9005,edge/epp-c@2001:db8::3:7000")

	writeFile("peers:\n- {name: epp-d, address: 192.0.2.400}\n")
	// The bad edit was read once it shows: the view stale, the error naming it.
	wait.For(t, 10*time.Second, func() string {
		doc, err := debugPeers(t, first)
		if err != nil {
			return err.Error()
		}
		if doc.Stale == nil || !*doc.Stale || doc.StaleReason != "parse" || !strings.Contains(doc.LastError, "192.0.2.400") {
			return fmt.Sprintf("after a bad edit: stale %v reason %q lastError %q, want stale for parse naming 192.0.2.400", doc.Stale, doc.StaleReason, doc.LastError)
		}
		return ""
	})
	expect(first, "bad edit keeps the last good set", "edge/epp-b@192.0.2.2:9005,edge/epp-c@2001:db8::3:7000")
	if _, m := get(t, first, "/metrics"); !strings.Contains(m, `epp_peer_discovery_errors_total{discovery="file",reason="parse"} 1`) {
		t.Errorf("/metrics does not count the bad edit once")
	}
	// The rejection is logged on one line, without a stack trace (those are for panics).
	if o := firstOut.String(); !strings.Contains(o, "peers file") || strings.Contains(o, "stacktrace") {
		t.Errorf("the error log of a bad file must be one line without a stack trace:\n%s", o)
	}

	// A second replica (epp-b) uses the first one's snapshot as its peers file.
	second := freeAddr(t)
	startBinary(t, bin, []string{"--enable-peer-discovery", "--epp-peer-file=" + snapPath,
		"--metrics-bind-address=" + second, "--health-probe-bind-address=" + freeAddr(t)},
		minimalEnv(t, "POD_NAME=epp-b", "NAMESPACE=edge"))
	expect(second, "snapshot as a peers file", "edge/epp-c@2001:db8::3:7000")

	writeFile("peers:\n- {name: epp-a, address: 192.0.2.1}\n- {name: epp-b, address: 192.0.2.2}\n- {name: epp-e, address: 192.0.2.5}\n")
	expect(first, "edit after a bad one", "edge/epp-b@192.0.2.2:9005,edge/epp-e@192.0.2.5:9005")
	expect(second, "snapshot follows", "edge/epp-e@192.0.2.5:9005")
}

// startServing runs bin against the test API server as a replica in ns and waits
// until it is ready; it returns the metrics address.
func startServing(t *testing.T, bin, ns string, args []string, extraEnv ...string) string {
	t.Helper()
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	startBinary(t, bin, append([]string{"--enable-peer-discovery", "--epp-peer-service=epp", "--kubeconfig=" + env.Kubeconfig,
		"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr}, args...),
		minimalEnv(t, append([]string{"NAMESPACE=" + ns}, extraEnv...)...))
	wait.For(t, 20*time.Second, func() string {
		if code, body := get(t, probeAddr, "/readyz"); code != 200 {
			return fmt.Sprintf("readyz: %d %s", code, body)
		}
		return ""
	})
	return metricsAddr
}

// TestBinaryStopsOnSIGTERM: on SIGTERM epp logs one line and exits within 5 s with
// code 0, leaving a complete snapshot file (and no temporary file) behind.
func TestBinaryStopsOnSIGTERM(t *testing.T) {
	bin := buildEpp(t)
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "sigterm", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "peers.json")
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	out, stop := startStoppableBinary(t, bin, []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--kubeconfig=" + env.Kubeconfig,
		"--epp-peer-snapshot-file=" + snap, "--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr},
		minimalEnv(t, "NAMESPACE="+ns, "POD_NAME=epp-0", "POD_IP=10.0.0.1"))
	wait.For(t, 20*time.Second, func() string {
		if b, err := os.ReadFile(snap); err != nil || !strings.Contains(string(b), ns+"/epp-1") {
			return "no snapshot with epp-1 yet"
		}
		return ""
	})
	before := len(strings.Split(strings.TrimSpace(out.String()), "\n"))
	sent := time.Now()
	stop() // SIGTERM; fails the test unless epp exits with code 0
	took := time.Since(sent)
	if t.Failed() {
		t.FailNow()
	}
	if took > 5*time.Second {
		t.Fatalf("epp took %s to stop after SIGTERM, want within 5 s", took)
	}
	t.Logf("stopped %s after SIGTERM", took.Round(time.Millisecond))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")[before:]
	if len(lines) != 1 || !strings.Contains(lines[0], "stopping") || !strings.Contains(lines[0], "terminated") {
		t.Fatalf("after SIGTERM epp logged %d lines, want one saying it stops on SIGTERM: %q", len(lines), lines)
	}
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	got, err := peerfile.Parse(data, peerfile.Defaults{Namespace: ns, Port: 1})
	if err != nil || len(got) != 1 || got[0].Name != "epp-1" {
		t.Fatalf("the snapshot left behind is not the last view: %v, %v\n%s", got, err, data)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(snap), ".peers.json.tmp-*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}
