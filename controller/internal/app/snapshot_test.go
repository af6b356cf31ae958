package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// startApp runs an app (as replica epp-0 at 10.0.0.1 in namespace ns, bound to
// 127.0.0.1) with args until the test ends.
func startApp(t *testing.T, args ...string) *app.App {
	t.Helper()
	args = append([]string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, args...)
	opts, err := app.Parse(args, env("POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return runApp(t, opts)
}

// runApp runs the app of opts until the test ends, when Run must return nil.
func runApp(t *testing.T, opts app.Options) *app.App {
	t.Helper()
	a, stop := launchApp(t, opts)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

// launchApp runs the app of opts; stop ends it and returns what Run returned.
func launchApp(t *testing.T, opts app.Options) (a *app.App, stop func() error) {
	t.Helper()
	a, err := app.New(opts, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return a, func() error { cancel(); return <-done }
}

// startFileApp runs an app with the file source on peersPath until the test ends.
func startFileApp(t *testing.T, peersPath string, extra ...string) *app.App {
	t.Helper()
	return startApp(t, append([]string{"--enable-peer-discovery", "--epp-peer-file=" + peersPath}, extra...)...)
}

const peerCount = 1000

func peersYAML(n, generation int) []byte {
	var b strings.Builder
	b.WriteString("peers:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "- {name: epp-%d, address: 10.%d.%d.%d, port: %d}\n", i, generation%250, i/250, i%250, 9000+generation%1000)
	}
	return []byte(b.String())
}

// readLoop reads path until stop closes (at most 100,000 times) and reports the first
// read that is not a complete JSON document.
func readLoop(path string, stop <-chan struct{}) (reads int, bad error) {
	for reads < 100000 {
		select {
		case <-stop:
			return reads, nil
		default:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return reads, fmt.Errorf("read %d: %w", reads, err)
		}
		if !json.Valid(data) {
			return reads, fmt.Errorf("read %d: %d bytes that are not a complete JSON document", reads, len(data))
		}
		reads++
	}
	return reads, nil
}

// TestWriteFileAtomicUnderLoad rewrites a ~100 KB document 200 times while a reader
// reads it in a loop: the reader only ever sees complete documents.
func TestWriteFileAtomicUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snapshot.json")
	doc := func(g int) []byte {
		var entries []peers.PeerMetadata
		for i := range peerCount {
			entries = append(entries, peers.PeerMetadata{Namespace: "ns", Name: fmt.Sprintf("epp-%d", i), Address: fmt.Sprintf("10.%d.%d.%d", g%250, i/250, i%250), Port: 9005})
		}
		b, _ := json.MarshalIndent(peers.Document{Enabled: true, Peers: peers.Entries(entries)}, "", "  ")
		return b
	}
	if err := debugpeers.WriteFileAtomic(path, doc(0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var reads int
	var bad error
	var wg sync.WaitGroup
	wg.Go(func() { reads, bad = readLoop(path, stop) })
	for g := 1; g <= 200; g++ {
		if err := debugpeers.WriteFileAtomic(path, doc(g)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatalf("a reader saw a partial file: %v", bad)
	}
	t.Logf("%d reads during 200 rewrites, all complete", reads)
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".snapshot.json.tmp-*")); len(matches) > 0 {
		t.Fatalf("temporary files left behind: %v", matches)
	}
}

// TestSnapshotFollowsThePeerSet changes the peers file 30 times while a reader reads
// the snapshot in a loop: every read is a complete document, and the last snapshot
// is a valid peers file holding the last set.
func TestSnapshotFollowsThePeerSet(t *testing.T) {
	dir := t.TempDir()
	peersPath, snapPath := filepath.Join(dir, "peers.yaml"), filepath.Join(dir, "snapshot.json")
	if err := os.WriteFile(peersPath, peersYAML(peerCount, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startFileApp(t, peersPath, "--epp-peer-snapshot-file="+snapPath)

	wait.Until(t, 10*time.Second, "the first snapshot", func() bool { _, err := os.Stat(snapPath); return err == nil })

	stop := make(chan struct{})
	var reads int
	var bad error
	var wg sync.WaitGroup
	wg.Go(func() { reads, bad = readLoop(snapPath, stop) })
	const generations = 30
	for g := 1; g <= generations; g++ {
		if err := debugpeers.WriteFileAtomic(peersPath, peersYAML(peerCount, g)); err != nil {
			t.Fatal(err)
		}
		// Each generation loaded before the next is written.
		wait.Until(t, 10*time.Second, fmt.Sprintf("generation %d in the store", g), func() bool {
			ps := a.Store.Peers()
			return len(ps) == peerCount && ps[0].Port == int32(9000+g)
		})
	}
	want := fmt.Sprintf(`"port": %d`, 9000+generations)
	wait.Until(t, 10*time.Second, "the last generation in the snapshot", func() bool {
		b, _ := os.ReadFile(snapPath)
		return bytes.Contains(b, []byte(want))
	})
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatalf("the reader saw a partial snapshot: %v", bad)
	}
	t.Logf("%d snapshot reads, all complete", reads)
	data, _ := os.ReadFile(snapPath)
	got, err := peerfile.Parse(data, peerfile.Defaults{Namespace: "ns", Port: 1})
	if err != nil {
		t.Fatalf("the snapshot is not a valid peers file: %v", err)
	}
	if len(got) != peerCount || len(a.Store.Peers()) != peerCount {
		t.Fatalf("snapshot has %d peers, store %d, want %d", len(got), len(a.Store.Peers()), peerCount)
	}
}

// TestSnapshotOfOneReplicaIsThePeersFileOfAnother chains two replicas: the first
// reads a peers file and writes a snapshot, the second reads that snapshot.
func TestSnapshotOfOneReplicaIsThePeersFileOfAnother(t *testing.T) {
	dir := t.TempDir()
	peersPath, snapPath := filepath.Join(dir, "peers.yaml"), filepath.Join(dir, "snapshot.json")
	// The first replica is epp-0 at 10.0.0.1 (left out of its own snapshot).
	if err := os.WriteFile(peersPath, []byte("peers:\n- {name: epp-0, address: 10.0.0.1}\n- {name: epp-1, address: 10.0.0.2}\n- {name: epp-2, address: 'fd00::3', port: 7000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startFileApp(t, peersPath, "--epp-peer-snapshot-file="+snapPath)
	wait.Until(t, 10*time.Second, "the snapshot", func() bool { _, err := os.Stat(snapPath); return err == nil })
	second := startFileApp(t, snapPath)
	doc := peerdoc.WaitSynced(t, second.MetricsAddr(), 10*time.Second)
	var got []string
	for _, p := range doc.Peers {
		got = append(got, p.ID+"="+peers.PeerMetadata{Address: p.Address, Port: p.Port}.HostPort())
	}
	// The second replica also runs as epp-0, so it sees the same two peers.
	if strings.Join(got, ",") != "ns/epp-1=10.0.0.2:9005,ns/epp-2=[fd00::3]:7000" {
		t.Fatalf("second replica's peers from the first one's snapshot: %v", got)
	}
}

// TestSnapshotWithPeerDiscoveryOff writes the disabled document.
func TestSnapshotWithPeerDiscoveryOff(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "snapshot.json")
	startApp(t, "--epp-peer-snapshot-file="+snap)
	wait.Until(t, 10*time.Second, "a snapshot with peer discovery off", func() bool { _, err := os.Stat(snap); return err == nil })
	b, _ := os.ReadFile(snap)
	if compact := strings.Join(strings.Fields(string(b)), ""); compact != `{"enabled":false,"peers":[]}` {
		t.Fatalf("snapshot with peer discovery off: %s", b)
	}
}

// TestFinalSnapshotFailureIsReported: when the last write on shutdown fails, Run
// says so (and the metric counts it) instead of leaving an old file silently.
func TestFinalSnapshotFailureIsReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshot.json")
	opts, err := app.Parse([]string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--epp-peer-snapshot-file=" + snap},
		env("POD_NAME", "epp-0", "NAMESPACE", "ns"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	_, stop := launchApp(t, opts)
	wait.Until(t, 10*time.Second, "the first snapshot", func() bool { _, err := os.Stat(snap); return err == nil })
	failures := metrics.Errors("off", metrics.ReasonSnapshot)
	before := testutil.ToFloat64(failures)
	if err := os.RemoveAll(dir); err != nil { // the volume went away
		t.Fatal(err)
	}
	err = stop()
	if err == nil || !strings.Contains(err.Error(), "final peer snapshot") {
		t.Fatalf("Run after a failed final snapshot = %v, want the failure", err)
	}
	if got := testutil.ToFloat64(failures) - before; got != 1 {
		t.Fatalf("%v snapshot failures counted, want 1", got)
	}
}
