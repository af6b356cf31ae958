package peersync

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// fdChildEnv runs TestFDLimitedReplica as the child of
// TestAcceptErrorsNeverStopTheSyncer: the peer's port to list.
const fdChildEnv = "PEERSYNC_FD_LIMITED_CHILD"

// fdLimit is the child's RLIMIT_NOFILE: its syncer runs out of descriptors under a
// flood of connections.
const fdLimit = 24

// TestAcceptErrorsNeverStopTheSyncer: a replica whose process runs out of file
// descriptors (a flood of connections from a peer's address, under a low
// RLIMIT_NOFILE) used to end its syncer for good on the first "accept4: too many
// open files". Now the accept errors are retried after a backoff: once the flood is
// over, a peer that reconnects is admitted and its values count again. The replica
// runs in a child process, so that the limit is its own.
func TestAcceptErrorsNeverStopTheSyncer(t *testing.T) {
	peer := startReplica(t, "epp-1")
	child := exec.Command(os.Args[0], "-test.run=^TestFDLimitedReplica$", "-test.v")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%d", fdChildEnv, peer.port))
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = child.Process.Kill()
		}
	})
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// next returns the child's next line with prefix, failing on RUN-ENDED.
	next := func(prefix string, within time.Duration) string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before %q", prefix)
				}
				if strings.HasPrefix(l, "RUN-ENDED") {
					t.Fatalf("the replica's syncer ended: %s", l)
				}
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix)
				}
			case <-deadline:
				t.Fatalf("no %q from the child within %v", prefix, within)
			}
		}
	}
	port, err := strconv.Atoi(next("PORT ", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	child0 := peers.PeerMetadata{Namespace: "ns", Name: "epp-0", Address: "127.0.0.1", Port: int32(port), Ready: true, Serving: true}
	peer.members.UpsertPeer(child0)
	if err := peer.s.Set("k", "ns/e", &load{Requests: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(want int64) {
		t.Helper()
		for {
			if n, _ := strconv.ParseInt(next("SUM ", 10*time.Second), 10, 64); n == want {
				return
			}
		}
	}
	waitFor(3) // the child's 1 and the peer's 2

	// The flood: held open, from the peer's address, more than the child has
	// descriptors for.
	var flood []net.Conn
	for range 4 * fdLimit {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	time.Sleep(time.Second)
	for _, c := range flood {
		c.Close()
	}
	// The peer reconnects (discovery drops the child and lists it again), with a new
	// value: the child admits it and counts it.
	peer.members.DeletePeer(child0.ID())
	wait.For(t, 5*time.Second, func() string {
		if testutil.ToFloat64(peersGauge.WithLabelValues(peer.instance)) == 0 {
			return ""
		}
		return "the peer did not drop the child"
	})
	peer.members.UpsertPeer(child0)
	if err := peer.s.Set("k", "ns/e", &load{Requests: 5}); err != nil {
		t.Fatal(err)
	}
	waitFor(6)
	if _, err := fmt.Fprintln(stdin, "report"); err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(next("ACCEPT-ERRORS ", 5*time.Second)); n == 0 {
		t.Fatalf("the flood caused no accept error: the fault was not injected (raise the flood or lower fdLimit %d)", fdLimit)
	}
}

// TestFDLimitedReplica is the child process of TestAcceptErrorsNeverStopTheSyncer;
// it does nothing when run on its own.
func TestFDLimitedReplica(t *testing.T) {
	peerPort := os.Getenv(fdChildEnv)
	if peerPort == "" {
		return
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = fdLimit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "epp-0")
	port, _ := strconv.Atoi(peerPort)
	r.members.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "127.0.0.1", Port: int32(port), Ready: true, Serving: true})
	if err := r.s.Set("k", "ns/e", &load{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PORT %d\n", r.port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Printf("ACCEPT-ERRORS %v\n", testutil.ToFloat64(acceptErrors.WithLabelValues(r.instance)))
		}
		cancel()
	}()
	last := int64(-2)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-r.done:
			fmt.Printf("RUN-ENDED %v\n", err)
			r.cancel = nil
			return
		case <-tick.C:
			if n := r.requests("k", "ns/e"); n != last {
				last = n
				fmt.Printf("SUM %d\n", n)
			}
		}
	}
}
