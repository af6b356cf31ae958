// Package proc runs a program of the project's as a process for a test: its output
// captured, stopped with SIGTERM when the test ends (it must exit with code 0 in
// time), its output shown when the test failed.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
)

// StopTimeout is how long a process may take to exit after SIGTERM.
const StopTimeout = 20 * time.Second

// Start runs bin with args and exactly the environment env, and returns its output
// and a function that stops it (SIGTERM, then it must exit with code 0 within
// StopTimeout), which the test's cleanup also calls.
func Start(t testing.TB, bin string, args, env []string) (*capture.Buffer, func()) {
	t.Helper()
	out, stop, _ := StartProcess(t, bin, args, env)
	return out, stop
}

// StartProcess is Start that also returns the process (for a test that signals it).
func StartProcess(t testing.TB, bin string, args, env []string) (*capture.Buffer, func(), *os.Process) {
	t.Helper()
	r, err := launch(bin, args, env)
	if err != nil {
		t.Fatal(err)
	}
	return r.out, r.supervise(t), r.cmd.Process
}

// ErrAddrInUse is what StartListening's error wraps when the process exited saying
// that an address it was to listen on was already in use.
var ErrAddrInUse = errors.New("address already in use")

// StartListening is StartProcess for a program that listens on the TCP ports of
// addrs (host:port): it returns once the process itself listens on every one of
// them (its own sockets, as /proc says, not those of a process that took the port
// meanwhile), with the same stop and cleanup as StartProcess. When the process
// exits first, or has not listened on them all within the given time (then it is
// killed), it returns an error with its output, which wraps ErrAddrInUse when the
// process said "address already in use": a port that was free when the test picked
// it was taken before the program bound it, and starting it again on other ports
// is the remedy.
func StartListening(t testing.TB, bin string, args, env, addrs []string, within time.Duration) (*capture.Buffer, func(), *os.Process, error) {
	t.Helper()
	ports := map[string]bool{}
	for _, a := range addrs {
		ports[a[strings.LastIndex(a, ":")+1:]] = true
	}
	r, err := launch(bin, args, env)
	if err != nil {
		return nil, nil, nil, err
	}
	deadline := time.Now().Add(within)
	for {
		listening, err := ListeningPorts(r.cmd.Process.Pid)
		missing := 0
		for p := range ports {
			if !listening[p] {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return r.out, r.supervise(t), r.cmd.Process, nil
		}
		select {
		case werr := <-r.done:
			out := r.out.String()
			if strings.Contains(out, "address already in use") {
				return nil, nil, nil, fmt.Errorf("%s exited (%w) before it listened on %v: %w; output:\n%s", bin, werr, addrs, ErrAddrInUse, out)
			}
			return nil, nil, nil, fmt.Errorf("%s exited (%w) before it listened on %v; output:\n%s", bin, werr, addrs, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = r.cmd.Process.Kill()
			killed := <-r.done
			why := fmt.Sprintf("%d of them not listened on", missing)
			if err != nil {
				why = fmt.Sprintf("reading /proc: %v", err)
			}
			return nil, nil, nil, fmt.Errorf("%s did not listen on all of %v within %s (%s), so it was killed (%w); output:\n%s", bin, addrs, within, why, killed, r.out.String())
		}
	}
}

// running is a started process whose exit done reports once.
type running struct {
	bin  string
	cmd  *exec.Cmd
	out  *capture.Buffer
	done chan error
}

func launch(bin string, args, env []string) (*running, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out := &capture.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &running{bin: bin, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	return r, nil
}

// supervise returns the stop function, and has the test's cleanup call it.
func (r *running) supervise(t testing.TB) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = r.cmd.Process.Signal(syscall.SIGCONT) // in case a test stopped it
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-r.done:
				if err != nil {
					t.Errorf("%s exited with %v after SIGTERM; output:\n%s", r.bin, err, r.out.String())
				}
			case <-time.After(StopTimeout):
				_ = r.cmd.Process.Kill()
				t.Errorf("%s did not stop within %s of SIGTERM; output:\n%s", r.bin, StopTimeout, r.out.String())
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", r.bin, r.out.String())
		}
	})
	return stop
}
