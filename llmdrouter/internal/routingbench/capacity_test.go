package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeCapacity is a configuration whose replicas use idle cores with no request
// and perRequest core-seconds per request more, with the given noise per window.
func fakeCapacity(config, title string, n int, idle, perRequest float64, noise []float64) capacityResult {
	r := capacityResult{config: config, title: title, replicas: n, scrapes: 20 * float64(n)}
	rates := []float64{0, 40, 80, 120, 160, 0}
	for i, rate := range rates {
		r.points = append(r.points, capacityPoint{rate: rate, cores: idle + perRequest*rate + noise[i], sent: int(rate), answered: int(rate),
			route: []time.Duration{time.Duration(n) * time.Millisecond}})
	}
	return r
}

// TestCapacityFitIsTheSlope: the marginal cost is the slope of cores against the
// rate, idle windows included, with an interval that holds it.
func TestCapacityFitIsTheSlope(t *testing.T) {
	r := fakeCapacity("single", "one replica", 1, 0.05, 0.002, []float64{0.001, -0.002, 0.002, -0.001, 0.001, -0.001})
	slope, intercept := r.fit()
	if math.Abs(slope.mean-0.002) > 5e-5 || !slope.includes(0.002) || slope.n != 6 {
		t.Fatalf("slope %+v, want about 0.002 core-seconds a request within its interval", slope)
	}
	if math.Abs(intercept-0.05) > 0.003 {
		t.Errorf("intercept %v, want about the idle 0.05", intercept)
	}
	if got := r.idle(); math.Abs(got-0.05) > 0.002 {
		t.Errorf("idle per replica %v, want about 0.05", got)
	}
}

func TestCapacityReportAndPlot(t *testing.T) {
	o, err := parseCapacityOptions([]string{"--epp=" + os.Args[0]})
	if err != nil {
		t.Fatal(err)
	}
	quiet := []float64{0, 0, 0, 0, 0, 0}
	results := []capacityResult{
		fakeCapacity("single", "one replica", 1, 0.04, 0.0020, quiet),
		fakeCapacity("local", "LocalSyncer (nothing shared)", 3, 0.12, 0.0020, quiet),
		fakeCapacity("local", "LocalSyncer (nothing shared)", 8, 0.32, 0.0021, quiet),
		fakeCapacity("shared-index", "shared prefix index", 3, 0.15, 0.0022, []float64{0.001, -0.001, 0.002, -0.002, 0.001, -0.001}),
		fakeCapacity("shared-index", "shared prefix index", 8, 0.40, 0.0025, []float64{0.002, -0.002, 0.003, -0.003, 0.002, -0.002}),
		{config: "peer", title: "peer-syncer (in-flight load shared)", replicas: 3, failure: "replica exited\nits output"},
	}
	md := capacityReport(o, results, time.Minute)
	for _, want := range []string{
		"| one replica | 1 | 2000 [2000, 2000] µs | 500 [500, 500] | 1.00 [1.00, 1.00] |",
		"| LocalSyncer (nothing shared) | 8 | 2100 [2100, 2100] µs | 476 [476, 476] | 0.95 [0.95, 0.95] |",
		"| shared prefix index | 8 | 25",         // 2500 µs, give or take the noise
		": **missed** |",                         // 2000/2500 = 0.80, below 1/1.1
		"| 4.0% of a core | 20.0 | 400 of 400 |", // one replica: idle 0.04 of a core, 20 scrapes a second, every request answered
		"| peer-syncer (in-flight load shared) | 3 | not measured: replica exited |",
		"capacity-headline:begin",
		"Capacity: one replica routes 500 requests a second per core of EPP; 3 replicas sharing the index give 2.7× one replica's capacity",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the capacity report lacks %q:\n%s", want, md)
		}
	}
	d := xml.NewDecoder(strings.NewReader(capacityPlot(o, results)))
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 3 { // local, peer (one point: the single replica's), shared-index
		t.Errorf("%d lines in the plot, want 3", lines)
	}
}
