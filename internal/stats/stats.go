// Package stats is the arithmetic the benchmarks and the tests that time things
// share: the median of the runs and a percentile of durations, each defined once, so
// that two tables that say "median" or "p99" mean the same.
package stats

import (
	"slices"
	"time"
)

// Number is what Median takes.
type Number interface {
	~int | ~int64 | ~float64
}

// Median of vs: the middle value, or the mean of the two middle ones; 0 for none.
// vs is not reordered.
func Median[T Number](vs []T) T {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Percentile of ds, p in [0, 1]: the value at rank ⌊len·p⌋ of the sorted ones (the
// largest for p = 1); 0 for none. ds is not reordered.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(float64(len(s))*p)))]
}
