package proc

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
)

// parentEnv makes the test binary a program that starts processes as a bench does
// (see runParent) and stops them on a signal with StopDescendantsOnSignal.
const parentEnv = "PROC_TEST_PARENT"

// runParent starts a process in a process group of its own (as envtest starts etcd
// and kube-apiserver) and a shell that runs one in the background (a grandchild),
// prints their IDs on one line, and waits for a signal.
func runParent() {
	StopDescendantsOnSignal("parent", 5*time.Second)
	own := exec.Command("sleep", "300")
	own.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	shell := exec.Command("sh", "-c", "sleep 300 & echo $!; wait")
	out, err := shell.StdoutPipe()
	if err == nil {
		err = own.Start()
	}
	if err == nil {
		err = shell.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	grandchild, _ := bufio.NewReader(out).ReadString('\n')
	fmt.Println(own.Process.Pid, shell.Process.Pid, strings.TrimSpace(grandchild))
	select {}
}

// A bench stopped with SIGTERM stops what it started, also a process in a group of
// its own and a grandchild, and exits with 128 + 15.
func TestStopDescendantsOnSignal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), parentEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the parent printed no process IDs: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(line) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("the parent printed %q", line)
		}
		pids = append(pids, p)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	if d, err := Descendants(cmd.Process.Pid); err != nil || len(d) != 3 {
		t.Fatalf("Descendants of the parent = %v, %v; want the 3 it started: %v", d, err, pids)
	}
	for _, p := range pids {
		if !Running(p) {
			t.Fatalf("process %d is not running before the signal", p)
		}
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the parent did not exit within 10 s of SIGTERM")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("the parent exited with %v, want exit status %d", err, 128+int(syscall.SIGTERM))
	}
	for _, p := range pids {
		if Running(p) {
			t.Errorf("process %d still runs after its parent stopped on SIGTERM", p)
		}
	}
}
