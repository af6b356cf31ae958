// Package cputime reads how much CPU time a process of this machine has used, for
// the benchmarks that compare two processes side by side.
package cputime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Tick is the resolution of Of: the kernel's clock tick for user and system time
// (USER_HZ, 100 a second on Linux).
const Tick = time.Second / 100

// Of is process pid's CPU time so far, every thread's, those that exited included:
// utime and stime of /proc/<pid>/stat, in clock ticks of Tick. (The threads'
// schedstat is finer, but a thread that exits takes its time along: a process that
// starts and ends goroutine threads reads less than it used.)
func Of(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * Tick, nil
}
