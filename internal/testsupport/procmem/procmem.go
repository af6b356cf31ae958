// Package procmem reads how much memory a process of this machine holds, for the
// benchmarks that report it.
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Usage is a process's resident memory, in bytes.
type Usage struct {
	// RSS is what it holds now (VmRSS).
	RSS int64
	// Peak is the most it held so far (VmHWM).
	Peak int64
}

// Of is process pid's resident memory, from /proc/<pid>/status.
func Of(pid int) (Usage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, err
	}
	return parseStatus(string(b))
}

// parseStatus reads VmRSS and VmHWM from a /proc/<pid>/status document.
func parseStatus(status string) (Usage, error) {
	var u Usage
	found := 0
	for _, line := range strings.Split(status, "\n") {
		for _, f := range []struct {
			key string
			to  *int64
		}{{"VmRSS:", &u.RSS}, {"VmHWM:", &u.Peak}} {
			v, ok := strings.CutPrefix(line, f.key)
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return u, fmt.Errorf("/proc/<pid>/status: %s %w", f.key, err)
			}
			*f.to = kb << 10
			found++
		}
	}
	if found != 2 {
		return u, fmt.Errorf("/proc/<pid>/status: want VmRSS and VmHWM, found %d of them", found)
	}
	return u, nil
}
