package stats_test

import (
	"slices"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(tc.in)
		if got := stats.Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Median reordered its input: %v", in)
		}
	}
	if got := stats.Median([]int64{7, 1, 9, 3}); got != 5 {
		t.Errorf("Median of int64s = %d, want 5", got)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // 100ms..1ms, unsorted
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0, time.Millisecond}, {0.5, 51 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {1, 100 * time.Millisecond},
	} {
		if got := stats.Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v of 1..100ms = %v, want %v", tc.p*100, got, tc.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile reordered its input")
	}
	if got := stats.Percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}
