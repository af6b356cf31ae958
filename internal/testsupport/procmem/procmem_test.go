package procmem

import (
	"os"
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	u, err := parseStatus("Name:\tepp\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t12\n")
	if err != nil || u.RSS != 100<<20 || u.Peak != 200<<20 {
		t.Errorf("parseStatus = %+v, %v; want RSS 100 MiB, peak 200 MiB", u, err)
	}
	if _, err := parseStatus("Name:\tkthreadd\n"); err == nil || !strings.Contains(err.Error(), "VmRSS") {
		t.Errorf("a kernel thread's status (no VmRSS): %v", err)
	}
}

func TestOfThisProcess(t *testing.T) {
	u, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.Peak < u.RSS {
		t.Errorf("this test's memory: %+v, want RSS > 0 and peak ≥ RSS", u)
	}
}
