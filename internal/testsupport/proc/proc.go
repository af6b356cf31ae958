// Package proc runs a program of the project's as a process for a test: its output
// captured, stopped with SIGTERM when the test ends (it must exit with code 0 in
// time), its output shown when the test failed.
package proc

import (
	"os"
	"os/exec"
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
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out := &capture.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT) // in case a test stopped it
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s exited with %v after SIGTERM; output:\n%s", bin, err, out.String())
				}
			case <-time.After(StopTimeout):
				_ = cmd.Process.Kill()
				t.Errorf("%s did not stop within %s of SIGTERM; output:\n%s", bin, StopTimeout, out.String())
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", bin, out.String())
		}
	})
	return out, stop, cmd.Process
}
