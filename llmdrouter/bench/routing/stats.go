package main

import (
	"fmt"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
)

// interval is a mean (or a fitted slope) with its 95% confidence interval
// (stats.Interval), as the reports write it.
type interval struct{ stats.Interval }

// meanInterval is the mean of vs and its 95% confidence interval.
func meanInterval(vs []float64) interval { return interval{stats.MeanInterval(vs)} }

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
	switch iv.N {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%.*f (1 seed)", digits, iv.Mean)
	}
	return fmt.Sprintf("%.*f [%.*f, %.*f]", digits, iv.Mean, digits, iv.Lo, digits, iv.Hi)
}

// shown says whether the interval shows the figure at least target: its lower end
// clears it. A mean above the target with an interval that reaches below is not
// shown; one whose whole interval is below is missed.
func (iv interval) shown(target float64) string {
	switch {
	case iv.N >= 2 && iv.Lo >= target:
		return "met"
	case iv.N >= 2 && iv.Hi < target:
		return "**missed**"
	}
	return "not shown"
}
