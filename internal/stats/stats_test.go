package stats_test

import (
	"math"
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

// TestMeanInterval: the 95% interval of the mean, by Student's t.
func TestMeanInterval(t *testing.T) {
	iv := stats.MeanInterval([]float64{1, 2, 3, 4, 5})
	// sd 1.5811, standard error 0.7071, t(4) 2.776.
	if math.Abs(iv.Mean-3) > 1e-9 || math.Abs(iv.Lo-1.0370) > 1e-3 || math.Abs(iv.Hi-4.9630) > 1e-3 || iv.N != 5 {
		t.Fatalf("interval %+v, want 3 [1.037, 4.963]", iv)
	}
	if !iv.Includes(3) || iv.Includes(5) {
		t.Errorf("%+v includes 3 and not 5", iv)
	}
	if one := stats.MeanInterval([]float64{0.9}); one.N != 1 || one.Mean != 0.9 || !math.IsNaN(one.Lo) || one.Includes(0.9) {
		t.Errorf("one sample: %+v", one)
	}
}

// TestLine: the least-squares slope with its interval, against a hand computation.
func TestLine(t *testing.T) {
	// y = 1 + 2x, with residuals +0.1, -0.1, -0.1, +0.1 at x = 0..3.
	xs, ys := []float64{0, 1, 2, 3}, []float64{1.1, 2.9, 4.9, 7.1}
	slope, intercept := stats.Line(xs, ys)
	// b = 2, a = 1; SSE 0.04 over 2 df, Sxx 5: se 0.0632, t(2) 4.303, half 0.2722.
	if math.Abs(slope.Mean-2) > 1e-9 || math.Abs(intercept-1) > 1e-9 || math.Abs(slope.Hi-slope.Mean-0.2722) > 1e-3 || slope.N != 4 {
		t.Fatalf("slope %+v, intercept %v; want 2 ± 0.272, 1", slope, intercept)
	}
	if s, a := stats.Line(xs[:2], ys[:2]); !math.IsNaN(s.Mean) || !math.IsNaN(a) {
		t.Errorf("two points: %+v %v, want NaN", s, a)
	}
}
