package peerview_test

import (
	"math"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
)

func TestHistogramQuantile(t *testing.T) {
	text := `# HELP x_seconds ...
x_seconds_bucket{le="0.1"} 50
x_seconds_bucket{le="0.5"} 90
x_seconds_bucket{le="1"} 100
x_seconds_bucket{le="+Inf"} 100
x_seconds_sum 12
x_seconds_count 100
other_bucket{le="0.1"} 7
`
	h := peerview.Histogram{}
	h.AddHistogram(text, "x_seconds")
	// A second replica whose series carry labels (as the labelled
	// epp_peer_discovery_* metrics do) counts the same.
	h.AddHistogram(strings.NewReplacer(`{le=`, `{discovery="peers",le=`).Replace(text), "x_seconds")
	if h.Count() != 200 {
		t.Fatalf("count %v, want 200", h.Count())
	}
	for q, want := range map[float64]float64{0.5: 0.1, 0.25: 0.05, 0.9: 0.5, 0.95: 0.75} {
		if got := h.Quantile(q); math.Abs(got-want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if !math.IsNaN((peerview.Histogram{}).Quantile(0.5)) {
		t.Error("an empty histogram has no quantile")
	}
}
