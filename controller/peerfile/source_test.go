package peerfile_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

var self = peers.Self{Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}

// running is a Source running on a file until the test ends.
type running struct {
	*peerfile.Source
	*discovery.Publisher
	store *peers.MemoryPeerStore
}

// run starts a Source on path. With poll == 0 the periodic re-read is effectively
// off, so that only file events can explain a reload.
func run(t *testing.T, path string, poll time.Duration) running {
	t.Helper()
	return runWith(t, peerfile.Config{Path: path, Defaults: defaults}, poll)
}

// runWith starts a Source for cfg.
func runWith(t *testing.T, cfg peerfile.Config, poll time.Duration) running {
	t.Helper()
	store := peers.NewMemoryPeerStore()
	pub := discovery.NewPublisher(peers.SourceFile, store, testr.New(t), discovery.PublisherOptions{Self: self, Reasons: peerfile.Reasons})
	cfg.PollInterval = time.Hour
	if poll > 0 {
		cfg.PollInterval = poll
	}
	src := peerfile.NewSource(cfg, pub, testr.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return running{Source: src, Publisher: pub, store: store}
}

func names(ps []peers.PeerMetadata) string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s@%s", p.Name, p.HostPort()))
	}
	return strings.Join(out, ",")
}

// waitPeers waits up to 5s for the store to hold exactly want.
func (r running) waitPeers(t *testing.T, step, want string) {
	t.Helper()
	wait.For(t, 5*time.Second, func() string {
		if got := names(r.store.Peers()); got != want {
			return fmt.Sprintf("%s: peers %q, want %q (last error: %v)", step, got, want, r.LastError())
		}
		return ""
	})
}

func peersFile(entries ...string) []byte {
	var b strings.Builder
	b.WriteString("peers:\n")
	for _, e := range entries {
		name, addr, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "- {name: %s, address: %q}\n", name, addr)
	}
	return []byte(b.String())
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameInto writes data to a temporary file in path's folder and renames it over path.
func renameInto(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadOnWriteCreateAndRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "peers.yaml")
	r := run(t, path, 0)

	// Missing at start: not synced, with a clear reason.
	// (The read is counted a moment before its failure is recorded: wait for both.)
	wait.Until(t, 5*time.Second, "the first read and its failure", func() bool { return r.Reads() > 0 && r.LastError() != nil })
	if r.Synced() || r.LastError() == nil || !strings.Contains(r.LastError().Error(), "does not exist yet") {
		t.Fatalf("missing file: synced=%v err=%v", r.Synced(), r.LastError())
	}

	write(t, path, peersFile("epp-0=10.0.0.1", "epp-1=10.0.0.2")) // create
	r.waitPeers(t, "create", "epp-1@10.0.0.2:9005")
	if !r.Synced() {
		t.Fatal("not synced after the file appeared")
	}

	write(t, path, peersFile("epp-1=10.0.0.2", "epp-2=fd00::3")) // write in place
	r.waitPeers(t, "write", "epp-1@10.0.0.2:9005,epp-2@[fd00::3]:9005")

	renameInto(t, path, peersFile("epp-3=10.0.0.4")) // atomic rename
	r.waitPeers(t, "rename", "epp-3@10.0.0.4:9005")

	// Self is left out by address as well as by name.
	renameInto(t, path, peersFile("other-name=10.0.0.1", "epp-4=10.0.0.5"))
	r.waitPeers(t, "self by address", "epp-4@10.0.0.5:9005")
}

// TestReloadOnConfigMapSymlinkSwap reproduces how the kubelet updates a ConfigMap
// volume: the file is a symlink into "..data", itself a symlink to a timestamped
// folder, and an update swaps "..data" with a rename.
func TestReloadOnConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := 0
	publish := func(data []byte) {
		version++
		ts := fmt.Sprintf("..2026_11_30_00_00_%02d.%d", version, 1000+version)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, ts, "peers.yaml"), data)
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(peersFile("epp-1=10.0.0.2"))
	if err := os.Symlink(filepath.Join("..data", "peers.yaml"), filepath.Join(dir, "peers.yaml")); err != nil {
		t.Fatal(err)
	}
	r := run(t, filepath.Join(dir, "peers.yaml"), 0)
	r.waitPeers(t, "initial", "epp-1@10.0.0.2:9005")
	for i := 2; i <= 4; i++ {
		publish(peersFile(fmt.Sprintf("epp-%d=10.0.0.%d", i, i+1)))
		r.waitPeers(t, fmt.Sprintf("swap %d", i), fmt.Sprintf("epp-%d@10.0.0.%d:9005", i, i+1))
	}
}

func TestBadInputKeepsTheLastGoodSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "peers.json")
	write(t, path, peersFile("epp-1=10.0.0.2", "epp-2=10.0.0.3"))
	r := run(t, path, 20*time.Millisecond) // fast polling must not count a bad file twice
	const good = "epp-1@10.0.0.2:9005,epp-2@10.0.0.3:9005"
	r.waitPeers(t, "good file", good)

	bad := []struct {
		name, content, reason string
		want                  []string
	}{
		{"unparsable", `{"peers": [`, metrics.ReasonParse, []string{"peers.json"}},
		{"invalid IPv4", `{"peers": [{"name": "epp-1", "address": "10.0.0.2"}, {"name": "epp-9", "address": "10.0.0.999"}]}`, metrics.ReasonParse, []string{"peers[1]", "epp-9", "address"}},
		{"IPv6 with brackets", `{"peers": [{"name": "epp-9", "address": "[fd00::9]"}]}`, metrics.ReasonParse, []string{"peers[0]", "address"}},
		{"port out of range", `{"peers": [{"name": "epp-9", "address": "10.0.0.9", "port": 65536}]}`, metrics.ReasonParse, []string{"peers[0]", "port"}},
		{"duplicate identity", `{"peers": [{"name": "epp-9", "address": "10.0.0.9"}, {"name": "epp-9", "address": "10.0.0.10"}]}`, metrics.ReasonParse, []string{"peers[1]", "duplicate"}},
		{"over 1 MiB", `{"peers": [], "source": "` + strings.Repeat("y", peerfile.MaxSize) + `"}`, metrics.ReasonParse, []string{"1 MiB"}},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			errs := r.Metrics().Errors(b.reason)
			before := testutil.ToFloat64(errs)
			renameInto(t, path, []byte(b.content))
			wait.Until(t, 5*time.Second, "a "+b.reason+" error counted", func() bool { return testutil.ToFloat64(errs) > before })
			reads := r.Reads()
			wait.Until(t, 5*time.Second, "several polls of the same bad content", func() bool { return r.Reads() >= reads+3 })
			if got := testutil.ToFloat64(errs) - before; got != 1 {
				t.Fatalf("%v errors counted for one bad file, want 1", got)
			}
			if got := names(r.store.Peers()); got != good {
				t.Fatalf("peers %q after a bad file, want the last good set %q", got, good)
			}
			msg := r.LastError().Error()
			for _, w := range b.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if !r.Synced() {
				t.Fatal("a bad file made the source unsynced; it keeps serving the last good set")
			}
		})
	}

	// Removing the file keeps the set too, and counts a read error, once however
	// often it is polled.
	readErrs := r.Metrics().Errors(metrics.ReasonRead)
	before := testutil.ToFloat64(readErrs)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 5*time.Second, "a read error counted", func() bool { return testutil.ToFloat64(readErrs) > before })
	reads := r.Reads()
	wait.Until(t, 5*time.Second, "several polls of the missing file", func() bool { return r.Reads() >= reads+3 })
	if got := testutil.ToFloat64(readErrs) - before; got != 1 {
		t.Fatalf("%v read errors for a removed file, want 1", got)
	}
	if got := names(r.store.Peers()); got != good {
		t.Fatalf("peers %q after the file was removed, want %q", got, good)
	}
	// And a good file recovers.
	write(t, path, peersFile("epp-5=10.0.0.6"))
	r.waitPeers(t, "recovered", "epp-5@10.0.0.6:9005")
	if r.LastError() != nil {
		t.Fatalf("error %v remains after a good file", r.LastError())
	}
}

// TestPollingCatchesWhatEventsMiss replaces the watched folder itself, which drops the
// fsnotify watch; the periodic re-read still picks up the new file.
func TestPollingCatchesWhatEventsMiss(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "peers")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "peers.yaml")
	write(t, path, peersFile("epp-1=10.0.0.2"))
	r := run(t, path, 100*time.Millisecond)
	r.waitPeers(t, "initial", "epp-1@10.0.0.2:9005")

	next := filepath.Join(parent, "peers.next")
	if err := os.Mkdir(next, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(next, "peers.yaml"), peersFile("epp-2=10.0.0.3"))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	r.waitPeers(t, "folder replaced", "epp-2@10.0.0.3:9005")
	write(t, path, peersFile("epp-3=10.0.0.4"))
	r.waitPeers(t, "write into the new folder", "epp-3@10.0.0.4:9005")
}

// TestMembershipAppliesToTheFile: a peers file may carry the conditions of the
// /debug/peers document; the replica's membership decides which entries are peers.
func TestMembershipAppliesToTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	doc := `{"peers": [{"name": "epp-1", "address": "10.0.0.2"}, {"name": "epp-2", "address": "10.0.0.3", "ready": false},
		{"name": "epp-3", "address": "10.0.0.4", "ready": false, "serving": true, "terminating": true}]}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for membership, want := range map[peers.Membership]string{
		peers.MembershipReady: "epp-1@10.0.0.2:9005",
		peers.MembershipAlive: "epp-1@10.0.0.2:9005,epp-2@10.0.0.3:9005",
	} {
		r := runWith(t, peerfile.Config{Path: path, Defaults: defaults, Membership: membership}, 0)
		r.waitPeers(t, string(membership), want)
	}
}

// TestZeroPollIntervalIsTheDefault: a Config without a poll interval polls at the
// default (a zero interval used to panic the ticker).
func TestZeroPollIntervalIsTheDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.yaml")
	write(t, path, peersFile("epp-1=10.0.0.2"))
	store := peers.NewMemoryPeerStore()
	pub := discovery.NewPublisher(peers.SourceFile, store, testr.New(t), discovery.PublisherOptions{Instance: t.Name()})
	src := peerfile.NewSource(peerfile.Config{Path: path, Defaults: defaults}, pub, testr.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	wait.Until(t, 5*time.Second, "the first read", pub.Synced)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestUnwatchableFolderIsLogged: when the folder cannot be watched (it does not
// exist yet), the source says so once and polls; once the folder is there it
// watches it again.
func TestUnwatchableFolderIsLogged(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "later", "peers.yaml")
	logs := &capture.Buffer{}
	store := peers.NewMemoryPeerStore()
	pub := discovery.NewPublisher(peers.SourceFile, store, logs.Logger(), discovery.PublisherOptions{Instance: t.Name()})
	src := peerfile.NewSource(peerfile.Config{Path: path, Defaults: defaults, PollInterval: 20 * time.Millisecond}, pub, logs.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wait.Until(t, 5*time.Second, "the watch failure logged", func() bool { return strings.Contains(logs.String(), "cannot watch the peers file's folder") })
	reads := src.Reads()
	wait.Until(t, 5*time.Second, "a few polls", func() bool { return src.Reads() >= reads+3 })
	if n := strings.Count(logs.String(), "cannot watch the peers file's folder"); n != 1 {
		t.Fatalf("the watch failure was logged %d times, want once", n)
	}
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, path, peersFile("epp-1=10.0.0.2"))
	wait.Until(t, 5*time.Second, "the file read by polling", pub.Synced)
	wait.Until(t, 5*time.Second, "the folder watched", func() bool { return strings.Contains(logs.String(), "watching the peers file's folder again") })
}
