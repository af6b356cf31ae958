// Package wait is the one way the tests wait for a condition: poll it, bounded in
// time, and fail with what the condition last said.
package wait

import (
	"time"
)

// T is what the waits need of a test (*testing.T, *testing.B).
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// For polls cond until it returns "" and returns how long that took. cond returns
// what keeps the test waiting ("peers [a b], want [a]"), or "" once it holds. Once
// within has passed, For fails t with cond's last answer. It polls often at first
// (every millisecond) and then about ten times per time waited so far, at most every
// 20 ms: a duration it returns is within 10% of the true one (a few milliseconds
// early on).
func For(t T, within time.Duration, cond func() string) time.Duration {
	t.Helper()
	return poll(t, within, func(took time.Duration) time.Duration {
		return min(max(took/10, time.Millisecond), 20*time.Millisecond)
	}, cond)
}

// ForEvery is For polling every interval: for a condition that costs (a request to
// each of fifty processes), where a duration within an interval is close enough.
func ForEvery(t T, within, every time.Duration, cond func() string) time.Duration {
	t.Helper()
	return poll(t, within, func(time.Duration) time.Duration { return every }, cond)
}

func poll(t T, within time.Duration, pause func(took time.Duration) time.Duration, cond func() string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		why := cond()
		took := time.Since(start)
		if why == "" {
			return took
		}
		if took > within {
			t.Fatalf("after %v: %s", within, why)
			return took
		}
		time.Sleep(pause(took))
	}
}

// Until is For for a condition that only says whether it holds; what names it in
// the failure ("timed out waiting for <what>").
func Until(t T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return For(t, within, func() string {
		if cond() {
			return ""
		}
		return "timed out waiting for " + what
	})
}
