package netns

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
)

// benchEnv makes the test binary a bench in a namespace of its own (see TestMain).
const benchEnv = "NETNS_TEST_BENCH"

// TestMain, with benchEnv set, is a bench: Isolate, then a process started in a
// group of its own (as envtest starts etcd and kube-apiserver), its ID printed, and
// a wait for a signal.
func TestMain(m *testing.M) {
	if os.Getenv(benchEnv) == "" {
		os.Exit(m.Run())
	}
	Isolate("netns test bench")
	child := exec.Command("sleep", "300")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(child.Process.Pid)
	select {}
}

// A bench in a namespace of its own that gets SIGTERM (routingbench stopped by
// kill, or make by Ctrl-C) stops what it started inside it, and exits with 128 + 15.
func TestASignalStopsWhatTheIsolatedBinaryStarted(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the bench printed no process ID (%v, %v); its stderr:\n%s", err, perr, stderr.String())
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the bench did not exit within 15 s of SIGTERM; its stderr:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("the bench exited with %v, want exit status %d; its stderr:\n%s", err, 128+int(syscall.SIGTERM), stderr.String())
	}
	if proc.Running(pid) {
		t.Errorf("the process the bench started (%d) still runs after the bench stopped on SIGTERM", pid)
	}
}
