package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/faultproxy"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
)

const herdReplicas = 50

// TestNoThunderingHerd runs 50 epp processes against one API server behind the
// proxy, then stops the server (the proxy accepts each connection and resets it,
// counting them) for 20 s: the replicas' attempts stay a steady trickle, at most
// about one per replica per second, never a burst. Then the server is back: every
// replica is fresh within 5 s.
func TestNoThunderingHerd(t *testing.T) {
	bin, err := testenv.BuildEpp()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, err := testenvOf().CreateNamespace(ctx, "herd", nil)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{}
	for i := range herdReplicas {
		args = append(args, fmt.Sprintf("epp-%d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
	}
	createSlice(t, adminCS, ns, "epp-a", args...)
	proxy, through := faultproxy.Through(t, admin)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(through, kubeconfig); err != nil {
		t.Fatal(err)
	}

	type proc struct {
		cmd     *exec.Cmd
		out     *capture.Buffer
		metrics string
		done    chan struct{}
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
			}
		}
	}()
	for i := range herdReplicas {
		// Each replica binds a port of its choice and logs it: no race for ports with
		// the machine's other connections.
		p := &proc{out: &capture.Buffer{}, done: make(chan struct{})}
		p.cmd = exec.Command(bin, "--enable-peer-discovery", "--epp-peer-service=epp", "--kubeconfig="+kubeconfig,
			"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
		p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "NAMESPACE=" + ns, fmt.Sprintf("POD_NAME=epp-%d", i)}
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		procs = append(procs, p)
	}
	for i, p := range procs {
		wait.For(t, 30*time.Second, func() string {
			if m := startedRE.FindStringSubmatch(p.out.String()); m != nil {
				p.metrics = m[1]
				return ""
			}
			return fmt.Sprintf("replica epp-%d did not start:\n%s", i, p.out.String())
		})
	}
	defer func() {
		if t.Failed() {
			for i, p := range procs {
				t.Logf("--- epp-%d:\n%s", i, p.out.String())
			}
		}
	}()
	// all polls every replica's /debug/peers (on 127.0.0.1), every 200 ms, until cond
	// holds for all.
	all := func(what string, within time.Duration, cond func(peers.Document) bool) time.Duration {
		t.Helper()
		return wait.ForEvery(t, within, 200*time.Millisecond, func() string {
			ok := 0
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, p := range procs {
				wg.Go(func() {
					doc, _, err := peerdoc.Get(p.metrics)
					if err == nil && cond(doc) {
						mu.Lock()
						ok++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if ok != len(procs) {
				return fmt.Sprintf("%s: %d of %d replicas", what, ok, len(procs))
			}
			return ""
		})
	}
	all("synced", 60*time.Second, func(d peers.Document) bool {
		return d.Synced != nil && *d.Synced && len(d.Peers) == herdReplicas-1
	})

	// The API server stops: count the connections the replicas open, second by second.
	if err := proxy.Set(faultproxy.Reset, ""); err != nil {
		t.Fatal(err)
	}
	const seconds = 20
	perSecond := make([]int64, 0, seconds)
	last := proxy.Accepted()
	for range seconds {
		time.Sleep(time.Second)
		now := proxy.Accepted()
		perSecond = append(perSecond, now-last)
		last = now
	}
	all("stale", 10*time.Second, func(d peers.Document) bool {
		return d.Stale != nil && *d.Stale && len(d.Peers) == herdReplicas-1
	})
	var steady, peak int64
	for i, n := range perSecond {
		peak = max(peak, n)
		if i >= 10 {
			steady += n
		}
	}
	steadyRate := float64(steady) / float64(seconds-10)
	t.Logf("connections per second against the stopped API server, %d replicas: %v", herdReplicas, perSecond)
	t.Logf("steady rate (seconds 10-20) %.1f/s = %.2f per replica per second; peak %d in one second", steadyRate, steadyRate/herdReplicas, peak)
	if steadyRate > 1.2*herdReplicas {
		t.Errorf("steady rate %.1f connections/s for %d replicas: more than about one per replica per second", steadyRate, herdReplicas)
	}
	if peak > 3*herdReplicas {
		t.Errorf("a burst of %d connections in one second from %d replicas", peak, herdReplicas)
	}

	// The API server is back.
	before := proxy.Accepted()
	if err := proxy.Set(faultproxy.Pass, ""); err != nil {
		t.Fatal(err)
	}
	took := all("fresh", 30*time.Second, func(d peers.Document) bool {
		return d.Stale != nil && !*d.Stale && len(d.Peers) == herdReplicas-1
	})
	t.Logf("all %d replicas fresh %s after the API server came back, with %d new connections", herdReplicas, took.Round(time.Millisecond), proxy.Accepted()-before)
	if took > recoverWithin+time.Second { // +1 s: the 200 ms polling of 50 replicas
		t.Errorf("replicas fresh only %s after the API server came back, want within %s", took, recoverWithin)
	}
	recordHerd(perSecond, steadyRate, peak, took)
}

// startedRE finds the metrics address in epp's "epp started" log line.
var startedRE = regexp.MustCompile(`"msg":"epp started".*"metrics":"(127\.0\.0\.1:\d+)"`)

func recordHerd(perSecond []int64, steady float64, peak int64, took time.Duration) {
	figures.Lock()
	defer figures.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf("%d replicas, API server stopped 20 s: %v connections/s (steady %.1f/s, peak %d); all fresh %.2fs after it came back",
		herdReplicas, perSecond, steady, peak, took.Seconds()))
}
