// Package proc runs a program of the project's as a process for a test or a
// benchmark: its output captured, stopped with SIGTERM (it must exit with code 0
// in time); for a test, stopped when the test ends and its output shown when the
// test failed.
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
	p, err := Launch(bin, args, env)
	if err != nil {
		t.Fatal(err)
	}
	return p.out, p.Supervise(t), p.cmd.Process
}

// Process is a program started by Launch or Listen.
type Process struct {
	bin    string
	cmd    *exec.Cmd
	out    *capture.Buffer
	exited chan struct{} // closed once it exited; then waitErr is Wait's error
	// waitErr is nil when it exited with code 0.
	waitErr error

	stopOnce sync.Once
	stopErr  error
}

// Launch runs bin with args and exactly the environment env, its output captured.
// Stop it with Stop (a test: Supervise).
func Launch(bin string, args, env []string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out := &capture.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{bin: bin, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// ErrAddrInUse is what Listen's error wraps when the process exited saying that an
// address it was to listen on was already in use.
var ErrAddrInUse = errors.New("address already in use")

// Listen is Launch for a program that listens on the TCP ports of addrs
// (host:port): it returns once the process itself listens on every one of them
// (its own sockets, as /proc says, not those of a process that took the port
// meanwhile). When the process exits first, or has not listened on them all
// within the given time (then it is killed), it returns an error with its output,
// which wraps ErrAddrInUse when the process said "address already in use": a port
// that was free when the caller picked it was taken before the program bound it,
// and starting it again on other ports is the remedy.
func Listen(bin string, args, env, addrs []string, within time.Duration) (*Process, error) {
	ports := map[string]bool{}
	for _, a := range addrs {
		ports[a[strings.LastIndex(a, ":")+1:]] = true
	}
	p, err := Launch(bin, args, env)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(within)
	for {
		listening, err := ListeningPorts(p.cmd.Process.Pid)
		missing := 0
		for port := range ports {
			if !listening[port] {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return p, nil
		}
		select {
		case <-p.exited:
			out := p.out.String()
			if strings.Contains(out, "address already in use") {
				return nil, fmt.Errorf("%s exited (%w) before it listened on %v: %w; output:\n%s", bin, p.waitErr, addrs, ErrAddrInUse, out)
			}
			return nil, fmt.Errorf("%s exited (%w) before it listened on %v; output:\n%s", bin, p.waitErr, addrs, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.cmd.Process.Kill()
			<-p.exited
			why := fmt.Sprintf("%d of them not listened on", missing)
			if err != nil {
				why = fmt.Sprintf("reading /proc: %v", err)
			}
			return nil, fmt.Errorf("%s did not listen on all of %v within %s (%s), so it was killed (%w); output:\n%s", bin, addrs, within, why, p.waitErr, p.out.String())
		}
	}
}

// Output is what the process wrote to stdout and stderr.
func (p *Process) Output() *capture.Buffer { return p.out }

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process exited; ExitError then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitError is nil once the process exited with code 0, and the reason otherwise
// (also while it runs: "still running").
func (p *Process) ExitError() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return fmt.Errorf("%s (pid %d) is still running", p.bin, p.Pid())
	}
}

// Stop sends the process SIGTERM (and SIGCONT, in case it was stopped) and waits
// for it to exit; it kills it when it has not exited within StopTimeout. The error
// says when it did not exit with code 0 in time; calls after the first return the
// first's.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		switch {
		case !Terminate(p.cmd.Process, p.exited, StopTimeout):
			p.stopErr = fmt.Errorf("%s did not stop within %s of SIGTERM; output:\n%s", p.bin, StopTimeout, p.out.String())
		case p.waitErr != nil:
			p.stopErr = fmt.Errorf("%s exited with %w after SIGTERM; output:\n%s", p.bin, p.waitErr, p.out.String())
		}
	})
	return p.stopErr
}

// Terminate sends p SIGTERM and waits until exited is closed (by whatever waits for
// p); after grace it kills p and waits again. It reports whether p exited within
// grace. Every process a test starts is stopped this way.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) bool {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return true
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
		return false
	}
}

// Supervise has the test's cleanup stop the process, and fail the test when it
// does not exit with code 0 in time; when the test failed, the cleanup logs the
// process's output. It returns a function that stops it earlier, with the same
// check.
func (p *Process) Supervise(t testing.TB) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := p.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.bin, p.out.String())
		}
	})
	return stop
}
