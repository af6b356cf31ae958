// Package stats is the arithmetic the benchmarks and the tests that time things
// share: the median of the runs, a percentile of durations, a mean's and a fitted
// slope's 95% confidence interval, each defined once, so that two tables that say
// "median", "p99" or "[lo, hi]" mean the same.
package stats

import (
	"math"
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

// Interval is a mean over N samples with its 95% confidence interval [Lo, Hi]
// (Student's t); with one sample, Lo and Hi are NaN, with none, all are.
type Interval struct {
	Mean, Lo, Hi float64
	N            int
}

// t975 is Student's t 0.975 quantile for 1 to 30 degrees of freedom.
var t975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// TQuantile975 is Student's t 0.975 quantile for df degrees of freedom (the
// normal's 1.960 above 30): the half-width of a 95% interval in standard errors.
func TQuantile975(df int) float64 {
	if df >= 1 && df <= len(t975) {
		return t975[df-1]
	}
	return 1.960
}

// MeanInterval is the mean of vs with its 95% confidence interval (N−1 degrees of
// freedom).
func MeanInterval(vs []float64) Interval {
	n := len(vs)
	if n == 0 {
		return Interval{Mean: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	mean := sum / float64(n)
	if n == 1 {
		return Interval{Mean: mean, Lo: math.NaN(), Hi: math.NaN(), N: 1}
	}
	ss := 0.0
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	half := TQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return Interval{Mean: mean, Lo: mean - half, Hi: mean + half, N: n}
}

// Line fits y = intercept + slope·x by least squares over the points (xs[i],
// ys[i]), with the slope's 95% confidence interval (N−2 degrees of freedom). Fewer
// than 3 points: NaN.
func Line(xs, ys []float64) (slope Interval, intercept float64) {
	n := min(len(xs), len(ys))
	if n < 3 {
		return Interval{Mean: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}, math.NaN()
	}
	var sx, sy float64
	for i := range n {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/float64(n), sy/float64(n)
	var sxx, sxy float64
	for i := range n {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	b := sxy / sxx
	a := my - b*mx
	var sse float64
	for i := range n {
		e := ys[i] - (a + b*xs[i])
		sse += e * e
	}
	half := TQuantile975(n-2) * math.Sqrt(sse/float64(n-2)/sxx)
	return Interval{Mean: b, Lo: b - half, Hi: b + half, N: n}, a
}

// Includes says whether the interval holds v (never, with fewer than 2 samples).
func (iv Interval) Includes(v float64) bool { return iv.N >= 2 && iv.Lo <= v && v <= iv.Hi }
