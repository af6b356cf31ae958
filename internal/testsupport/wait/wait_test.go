package wait_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// fakeT records a failure instead of ending the test.
type fakeT struct{ failed string }

func (*fakeT) Helper()                             {}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	took := wait.For(t, 5*time.Second, func() string {
		if time.Now().Before(deadline) {
			return "not yet"
		}
		return ""
	})
	if took < 50*time.Millisecond || took > time.Second {
		t.Fatalf("took %v for a condition that held after 50ms", took)
	}
}

func TestForFailsWithTheLastAnswer(t *testing.T) {
	var f fakeT
	n := 0
	start := time.Now()
	wait.For(&f, 30*time.Millisecond, func() string { n++; return fmt.Sprintf("answer %d", n) })
	if !strings.HasPrefix(f.failed, "after 30ms: answer ") || !strings.HasSuffix(f.failed, fmt.Sprint(n)) {
		t.Fatalf("failed with %q after %d polls", f.failed, n)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a 30ms wait took %v", took)
	}
	var g fakeT
	wait.Until(&g, 10*time.Millisecond, "the moon", func() bool { return false })
	if g.failed != "after 10ms: timed out waiting for the moon" {
		t.Fatalf("Until failed with %q", g.failed)
	}
}
