package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StopDescendantsOnSignal makes SIGINT, SIGTERM and SIGHUP stop this process's
// descendants before it exits: the processes it started, and theirs, also those in
// process groups of their own (envtest starts etcd and kube-apiserver in theirs, so
// a terminal's Ctrl-C never reaches them). Each gets SIGTERM (and SIGCONT, in case
// it was stopped), and SIGKILL when it has not exited within grace; then this
// process exits with 128 + the signal's number. Without it, a bench or a suite
// stopped by a signal leaves its EPPs, etcd and kube-apiserver running. name starts
// the one line it prints.
func StopDescendantsOnSignal(name string, grace time.Duration) {
	signals := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, signals...)
	go func() {
		s := <-ch
		signal.Ignore(signals...) // a second Ctrl-C does not cut the clean-up short
		pids, err := Descendants(os.Getpid())
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v: listing the processes it started: %v\n", name, s, err)
		}
		fmt.Fprintf(os.Stderr, "%s: %v: stopping the %d processes it started\n", name, s, len(pids))
		StopAll(pids, grace)
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
}

// Descendants returns the IDs of process pid's children, their children and so on,
// as /proc lists them now (Linux).
func Descendants(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		if parent, ok := parentOf(child); ok {
			children[parent] = append(children[parent], child)
		}
	}
	var out []int
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, p)
	}
	return out, nil
}

// StopAll sends every process of pids SIGCONT and SIGTERM, waits until each has
// exited (or is a zombie, which its parent has yet to reap) and kills those still
// running after grace.
func StopAll(pids []int, grace time.Duration) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGCONT)
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for {
		var running []int
		for _, p := range pids {
			if Running(p) {
				running = append(running, p)
			}
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range running {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parentOf is the parent process ID of pid, from /proc/<pid>/stat; false once pid
// has exited.
func parentOf(pid int) (int, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// Running reports whether process pid runs: it exists and is no zombie (one that
// exited and that its parent has yet to reap).
func Running(pid int) bool {
	f, ok := statFields(pid)
	return ok && len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// statFields are the fields of /proc/<pid>/stat after the command name (which may
// hold spaces and parentheses): the state first, then the parent's ID.
func statFields(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])), true
}
