package main

import (
	"fmt"
	"math"
)

// interval is a mean over n samples with its 95% confidence interval (Student's t,
// n−1 degrees of freedom); with one sample, no interval.
type interval struct {
	mean, lo, hi float64
	n            int
}

// tQuantile975 is Student's t 0.975 quantile for 1 to 30 degrees of freedom.
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

func tQuantile(df int) float64 {
	if df >= 1 && df <= len(tQuantile975) {
		return tQuantile975[df-1]
	}
	return 1.960
}

// meanInterval is the mean of vs and its 95% confidence interval.
func meanInterval(vs []float64) interval {
	n := len(vs)
	if n == 0 {
		return interval{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	mean := sum / float64(n)
	if n == 1 {
		return interval{mean: mean, lo: math.NaN(), hi: math.NaN(), n: 1}
	}
	ss := 0.0
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	half := tQuantile(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return interval{mean: mean, lo: mean - half, hi: mean + half, n: n}
}

// pairedRatios is, over the seeds that rs and base both ran, the mean of the
// per-seed ratios f(r)/f(base) with its interval: the same seed is the same
// workload (its text aside), so a seed that is hard for both cancels out.
func pairedRatios(rs, base []result, f func(result) float64) interval {
	bySeed := map[uint64]float64{}
	for _, b := range base {
		bySeed[b.seed] = f(b)
	}
	var vs []float64
	for _, r := range rs {
		if d, ok := bySeed[r.seed]; ok && d > 0 {
			vs = append(vs, f(r)/d)
		}
	}
	return meanInterval(vs)
}

// values is f of each of rs, with its interval.
func values(rs []result, f func(result) float64) interval {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return meanInterval(vs)
}

// format writes the mean and, with two samples or more, the interval in brackets.
func (iv interval) format(digits int) string {
	switch iv.n {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%.*f (1 seed)", digits, iv.mean)
	}
	return fmt.Sprintf("%.*f [%.*f, %.*f]", digits, iv.mean, digits, iv.lo, digits, iv.hi)
}

// shown says whether the interval shows the figure at least target: its lower end
// clears it. A mean above the target with an interval that reaches below is not
// shown; one whose whole interval is below is missed.
func (iv interval) shown(target float64) string {
	switch {
	case iv.n >= 2 && iv.lo >= target:
		return "met"
	case iv.n >= 2 && iv.hi < target:
		return "**missed**"
	}
	return "not shown"
}

// includes says whether the interval holds v (one sample: never).
func (iv interval) includes(v float64) bool { return iv.n >= 2 && iv.lo <= v && v <= iv.hi }
