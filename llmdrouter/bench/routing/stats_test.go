package main

import (
	"math"
	"testing"
)

// TestMeanInterval: the 95% interval of the mean, by Student's t.
func TestMeanInterval(t *testing.T) {
	iv := meanInterval([]float64{1, 2, 3, 4, 5})
	// sd 1.5811, standard error 0.7071, t(4) 2.776.
	if math.Abs(iv.Mean-3) > 1e-9 || math.Abs(iv.Lo-1.0370) > 1e-3 || math.Abs(iv.Hi-4.9630) > 1e-3 || iv.N != 5 {
		t.Fatalf("interval %+v, want 3 [1.037, 4.963]", iv)
	}
	if got := iv.shown(1.0); got != "met" {
		t.Errorf("lower end 1.037 against 1.0: %s", got)
	}
	if got := iv.shown(2.0); got != "not shown" {
		t.Errorf("mean 3, lower end 1.037 against 2.0: %s", got)
	}
	if got := iv.shown(5.0); got != "**missed**" {
		t.Errorf("upper end 4.963 against 5.0: %s", got)
	}
	if one := meanInterval([]float64{0.9}); one.shown(0.5) != "not shown" || one.format(2) != "0.90 (1 seed)" {
		t.Errorf("one sample: %+v %q", one, one.format(2))
	}
}

// TestPairedRatiosPairBySeed: each seed's ratio is taken against the same seed's
// reference, and seeds only one side ran are left out.
func TestPairedRatiosPairBySeed(t *testing.T) {
	hit := func(r result) float64 { return float64(r.srvCached) }
	rs := []result{{seed: 1, srvCached: 50}, {seed: 2, srvCached: 90}, {seed: 3, srvCached: 10}}
	base := []result{{seed: 1, srvCached: 100}, {seed: 2, srvCached: 100}}
	iv := pairedRatios(rs, base, hit)
	if iv.N != 2 || math.Abs(iv.Mean-0.7) > 1e-9 {
		t.Fatalf("paired %+v, want the mean of 0.5 and 0.9 over 2 seeds", iv)
	}
}
