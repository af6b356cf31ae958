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

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
)

// fakeCapacity is a configuration whose replicas use idle cores with no request
// and perRequest core-seconds per request more, with the given noise per window,
// in two rounds of an idle window and three rates.
func fakeCapacity(config, title string, n int, idle, perRequest float64, noise []float64) capacityResult {
	return capacityResult{config: config, title: title, replicas: n, scrapes: 20, points: fakeRounds(n, idle, perRequest, noise)}
}

func fakeRounds(n int, idle, perRequest float64, noise []float64) []capacityPoint {
	var ps []capacityPoint
	for i, rate := range []float64{0, 40, 80, 120, 0, 40, 80, 120} {
		p := capacityPoint{rate: rate, round: i / 4, cores: idle + perRequest*rate + noise[i%len(noise)], sent: int(rate), answered: int(rate),
			route: []time.Duration{time.Duration(n) * time.Millisecond}}
		for range n {
			p.perCore = append(p.perCore, p.cores/float64(n))
		}
		ps = append(ps, p)
	}
	return ps
}

// TestCapacityFitIsTheSlope: the marginal cost is the slope of cores against the
// rate, idle windows included, with an interval that holds it.
func TestCapacityFitIsTheSlope(t *testing.T) {
	r := fakeCapacity("single", "one replica", 1, 0.05, 0.002, []float64{0.001, -0.002, 0.002, -0.001, 0.001, -0.001})
	slope, intercept := r.fit()
	if math.Abs(slope.Mean-0.002) > 5e-5 || !slope.Includes(0.002) || slope.N != 8 {
		t.Fatalf("slope %+v, want about 0.002 core-seconds a request within its interval", slope)
	}
	if math.Abs(intercept-0.05) > 0.003 {
		t.Errorf("intercept %v, want about the idle 0.05", intercept)
	}
	if got := r.idle(); math.Abs(got-0.05) > 0.002 {
		t.Errorf("idle per replica %v, want about 0.05", got)
	}
	// Idle is per replica measured: 8 replicas that use 8 × 0.05, and one replica
	// of 8 whose peers are emulated (only its CPU read), both 0.05 a replica.
	fleet := fakeCapacity("local", "LocalSyncer", 8, 8*0.05, 0.002, []float64{0})
	one := fleet
	one.points = fakeRounds(1, 0.05, 0.002, []float64{0})
	for _, r := range []capacityResult{fleet, one} {
		if got := r.idle(); math.Abs(got-0.05) > 1e-9 {
			t.Errorf("idle per replica of %d replicas measured: %v, want 0.05", len(r.points[0].perCore), got)
		}
	}
}

// TestCapacityFitUsesTheRateAchieved: a fleet that could not keep up with the rate
// asked (its windows took longer, at the same CPU a request) is fitted at the rate
// it achieved, so its marginal cost is not understated.
func TestCapacityFitUsesTheRateAchieved(t *testing.T) {
	ps := fakeRounds(8, 0.3, 0.002, []float64{0})
	for i := range ps {
		if ps[i].rate == 120 { // took a third longer than asked: 90 a second
			ps[i].wall = time.Duration(float64(time.Second) * float64(ps[i].answered) / 90)
			ps[i].cores = 0.3 + 0.002*90
		}
	}
	if slope, _ := fitPoints(ps); math.Abs(slope.Mean-0.002) > 1e-9 {
		t.Fatalf("slope %v, want 0.002 core-seconds a request, fitted at the rates achieved", slope.Mean)
	}
}

// TestEfficiencyIsPairedByRound: a drift that raises both fleets' cost in one
// round cancels out of the efficiency, as it would not from the two pooled slopes.
func TestEfficiencyIsPairedByRound(t *testing.T) {
	ref := fakeRounds(1, 0.04, 0.002, []float64{0})
	sub := fakeRounds(8, 0.3, 0.0025, []float64{0})
	for i := range ref { // round 2 on a machine 1.5 times slower, for both
		if ref[i].round == 1 {
			ref[i].cores *= 1.5
			sub[i].cores *= 1.5
		}
	}
	r := capacityResult{config: "shared-index", replicas: 8, points: sub, ref: ref}
	e := r.efficiency()
	if e.N != 2 || math.Abs(e.Mean-0.8) > 1e-9 || math.Abs(e.Lo-0.8) > 1e-9 {
		t.Fatalf("efficiency %+v, want exactly 0.80 in both rounds", e)
	}
	if _, err := parseCapacityOptions([]string{"--epp=" + os.Args[0], "--rounds=1"}); err == nil || !strings.Contains(err.Error(), "--rounds=1") {
		t.Errorf("--rounds=1: got %v, want an error naming it", err)
	}
}

// TestABuildIsComparedWithItsBaselinePairedByRound: --baseline-epp runs each
// configuration but single also on the other build, right after it; the report
// gives this build's efficiency over the baseline's per round, so a round on a
// slower machine (for the reference and both builds) changes nothing, and a
// build whose requests cost 0.0025 against the baseline's 0.003 shows 1.2.
func TestABuildIsComparedWithItsBaselinePairedByRound(t *testing.T) {
	o, err := parseCapacityOptions([]string{"--epp=" + os.Args[0], "--baseline-epp=" + os.Args[0], "--configs=single,local,shared-index-default", "--replicas=8"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range o.configs {
		names = append(names, c.name)
		if strings.HasSuffix(c.name, baselineSuffix) != (c.epp == os.Args[0]) {
			t.Errorf("%s runs build %q", c.name, c.epp)
		}
	}
	if got := strings.Join(names, ","); got != "single,local,local-baseline,shared-index-default,shared-index-default-baseline" {
		t.Errorf("configurations %s: want each but single followed by its twin on the baseline build", got)
	}
	if _, err := parseCapacityOptions([]string{"--epp=" + os.Args[0], "--baseline-epp=/nonexistent/epp"}); err == nil || !strings.Contains(err.Error(), "--baseline-epp=/nonexistent/epp") {
		t.Errorf("a missing baseline build: got %v, want an error naming the flag", err)
	}

	ref := fakeRounds(1, 0.04, 0.002, []float64{0})
	today, base := fakeRounds(8, 0.3, 0.0025, []float64{0}), fakeRounds(8, 0.3, 0.003, []float64{0})
	for i := range ref {
		if ref[i].round == 1 {
			ref[i].cores *= 1.5
			today[i].cores *= 1.5
			base[i].cores *= 1.5
		}
	}
	r := capacityResult{config: "shared-index-default", title: "shared prefix index, default profile", replicas: 8, points: today, ref: ref}
	b := capacityResult{config: "shared-index-default" + baselineSuffix, title: "shared prefix index, default profile, baseline build", replicas: 8, points: base, ref: ref}
	if got := r.over(b); got.N != 2 || math.Abs(got.Mean-1.2) > 1e-9 || math.Abs(got.Lo-1.2) > 1e-9 {
		t.Fatalf("over the baseline %+v, want exactly 1.20 in both rounds", got)
	}
	table := baselineTable("/tmp/old/epp", []capacityResult{fakeCapacity("single", "one replica", 1, 0.04, 0.002, []float64{0}), r, b})
	if !strings.Contains(table, "| shared prefix index, default profile | 8 | 1.20 [1.20, 1.20] |") || strings.Count(table, "\n| shared") != 1 {
		t.Errorf("the table compares each configuration once with its twin, got:\n%s", table)
	}
	if baselineTable("", []capacityResult{r, b}) != "" {
		t.Error("with no baseline build, no comparison")
	}
}

// TestTheFullRateRowIsSetAgainstOneReplicaWithTheSameIndex: the row of one
// replica of N at the full rate is divided by one replica with the same index
// and profile and no peer, round by round, so that what the index costs one
// replica against upstream's (the reference) is left out of the sharing's cost.
func TestTheFullRateRowIsSetAgainstOneReplicaWithTheSameIndex(t *testing.T) {
	ref := fakeRounds(1, 0.04, 0.002, []float64{0})
	for i := range ref {
		if ref[i].round == 1 {
			ref[i].cores *= 1.5
		}
	}
	scaled := func(perRequest float64) []capacityPoint {
		ps := fakeRounds(1, 0.05, perRequest, []float64{0})
		for i := range ps {
			if ps[i].round == 1 {
				ps[i].cores *= 1.5
			}
		}
		return ps
	}
	single := capacityResult{config: "single", title: "one replica", replicas: 1, points: ref}
	shared := capacityResult{config: "single-shared", title: "one replica + shared prefix index (control)", replicas: 1, points: scaled(0.0025), ref: ref}
	loaded := capacityResult{config: "shared-index-loaded", title: "one of N at the full rate", replicas: 8, points: scaled(0.003), ref: ref}
	results := []capacityResult{single, shared, loaded}
	table := sharingTable(results)
	if !strings.Contains(table, "| one of N at the full rate | 8 | one replica + shared prefix index (control) | 0.83 [0.83, 0.83] |") {
		t.Errorf("the sharing alone: 0.0025 over 0.003 a request is 0.83 in both rounds; got:\n%s", table)
	}
	if h := capacityHeadline(results, scrapeLoadResult{}); !strings.Contains(h, "8 give 5.3× [5.3, 5.3]") || !strings.Contains(h, "(6.7× [6.7, 6.7] against one replica with this index)") {
		t.Errorf("the headline gives the row against the reference and against one replica with this index; got %s", h)
	}
	if sharingTable([]capacityResult{single, loaded}) != "" {
		t.Error("without single-shared, no table of the sharing alone")
	}
}

// TestCostAtIsAboveIdlePairedByRound: the cost of a request at a rate is the
// window's CPU less the same round's idle window's, over the rate: a drift that
// raises a whole round cancels out, and a fixed cost a second shows as a higher
// cost a request at lower rates.
func TestCostAtIsAboveIdlePairedByRound(t *testing.T) {
	ps := fakeRounds(1, 0.05, 0.002, []float64{0})
	for i := range ps {
		if ps[i].round == 1 {
			ps[i].cores += 0.3 // round 2 on a busier machine
		}
		if ps[i].rate > 0 {
			ps[i].cores += 0.04 // 0.04 cores of work a second once there is any request
		}
	}
	r := capacityResult{config: "single", replicas: 1, points: ps}
	for rate, want := range map[float64]float64{40: 0.002 + 0.04/40, 120: 0.002 + 0.04/120} {
		if c := r.costAt(rate); c.N != 2 || math.Abs(c.Mean-want) > 1e-12 || math.Abs(c.Hi-c.Lo) > 1e-12 {
			t.Errorf("cost at %v: %+v, want %v in both rounds", rate, c, want)
		}
	}
	if got := (capacityResult{config: "shared-index-default", replicas: 8}).perReplica(400); got != 50 {
		t.Errorf("8 replicas that share 400 a second route %v each, want 50", got)
	}
	if got := (capacityResult{config: "shared-index-loaded", replicas: 8}).perReplica(400); got != 400 {
		t.Errorf("one replica of 8 at the full rate routes %v, want 400", got)
	}
}

func TestCapacityReportAndPlot(t *testing.T) {
	o, err := parseCapacityOptions([]string{"--epp=" + os.Args[0]})
	if err != nil {
		t.Fatal(err)
	}
	quiet := []float64{0, 0, 0, 0, 0, 0}
	paired := func(r capacityResult) capacityResult {
		r.ref = fakeRounds(1, 0.04, 0.0020, quiet)
		return r
	}
	results := []capacityResult{
		fakeCapacity("single", "one replica", 1, 0.04, 0.0020, quiet),
		paired(fakeCapacity("local", "LocalSyncer (nothing shared)", 3, 0.12, 0.0020, quiet)),
		paired(fakeCapacity("local", "LocalSyncer (nothing shared)", 8, 0.32, 0.0021, quiet)),
		paired(fakeCapacity("shared-index", "shared prefix index", 3, 0.15, 0.0022, []float64{0.001, -0.001, 0.002, -0.002})),
		paired(fakeCapacity("shared-index", "shared prefix index", 8, 0.40, 0.0025, []float64{0.002, -0.002, 0.003, -0.003})),
		{config: "peer", title: "peer-syncer (in-flight load shared)", replicas: 3, failure: "replica exited\nits output"},
	}
	md := capacityReport(o, results, scrapeLoadResult{}, time.Minute)
	for _, want := range []string{
		"| one replica | 1 | 2000 [2000, 2000] µs | 500 [500, 500] | the reference |",
		"| LocalSyncer (nothing shared) | 8 | 2100 [2100, 2100] µs | 476 [476, 476] | 0.95 [0.95, 0.95] |",
		"| shared prefix index | 8 | 24",         // 2500 µs, less the noise
		": **missed** |",                         // 2000/2500 = 0.80, below 1/1.1
		"| 4.0% of a core | 20.0 | 480 of 480 |", // one replica: idle 0.04 of a core, 20 scrapes a second, every request answered
		"| peer-syncer (in-flight load shared) | 3 | not measured: replica exited |",
		"capacity-headline:begin",
		"Capacity: one replica routes 500 [500, 500] requests a second per core of EPP at 120 requests a second, 500 [500, 500] at 40 (",
		"over 40 to 120 requests a second, its marginal cost gives 500. Against that marginal cost, paired in time, replicas sharing the index with state sync's profile: 3 give 2.7× [",
		// The curve: the cost above idle at each rate, and the rate each replica routes.
		"| 40 a second in all | 80 a second in all | 120 a second in all |",
		"| one replica | 1 | 2000 [2000, 2000] µs at 40 a replica | 2000 [2000, 2000] µs at 80 a replica | 2000 [2000, 2000] µs at 120 a replica |",
		"| LocalSyncer (nothing shared) | 8 | 2100 [2100, 2100] µs at 5 a replica |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the capacity report lacks %q:\n%s", want, md)
		}
	}
	d := xml.NewDecoder(strings.NewReader(capacityPlot(results)))
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
	if lines != 3 { // one replica, and LocalSyncer at 3 and 8 (the shared index on state sync's profile is not drawn)
		t.Errorf("%d lines in the plot, want 3", lines)
	}
}

// TestScrapeLoadReport: the scrape load's table and sentence give each fleet's
// scrapes and idle CPU, and the ratio paired by window (a drift that raises both
// fleets in one window cancels out of it); the bench fails when shared scraping
// reads a server more often than one replica would, or the other fleet less often
// than every replica would.
func TestScrapeLoadReport(t *testing.T) {
	o := scrapeLoadOptions{servers: 32, replicas: 8, refresh: time.Second, page: modelsim.VLLMPage, windows: 4, window: 5 * time.Second}
	r := scrapeLoadResult{o: o, fleets: []scrapeFleet{
		{config: "shared-index-default", scrapes: 8.0, idle: []float64{0.10, 0.20, 0.10, 0.20}},
		{config: "shared-scraping", scrapes: 1.0, idle: []float64{0.04, 0.08, 0.04, 0.08}},
	}}
	if iv := r.ratio(); iv.N != 4 || math.Abs(iv.Mean-0.4) > 1e-9 || math.Abs(iv.Lo-0.4) > 1e-9 {
		t.Fatalf("ratio %+v, want exactly 0.40 in every window", iv)
	}
	md := r.report()
	for _, want := range []string{
		"| every replica scrapes every server (`metrics-data-source`) | 8 | 32 | 8.0 | 15.0 [",
		"| shared scraping (`fleet-metrics-data-source`) | 8 | 32 | 1.0 | 6.0 [",
		"At 8 replicas and 32 servers (a vLLM server's whole page, scraped every 1s), shared scraping reads each server 1.0 times a second against 8.0, and a replica's idle CPU is 0.40 [0.40, 0.40] of what it is",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the scrape load report lacks %q:\n%s", want, md)
		}
	}
	if err := r.check(); err != nil {
		t.Errorf("check: %v", err)
	}
	r.fleets[1].scrapes = 2.0 // two replicas scrape each server
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "shared scraping: 2.0 scrapes") {
		t.Errorf("check with 2 scrapes per server and second shared: %v, want an error", err)
	}
	r.fleets[0].scrapes, r.fleets[1].scrapes = 3.0, 1.0
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "every replica scraping: 3.0") {
		t.Errorf("check with 3 scrapes per server and second from 8 replicas: %v, want an error", err)
	}
	results := []capacityResult{{config: "single", replicas: 1, scrapes: 20}, {config: "shared-index-default", replicas: 3, scrapes: 60},
		{config: "shared-scraping", replicas: 3, scrapes: 20}, {config: "shared-scraping", replicas: 8, scrapes: 20.1}}
	if got, want := scrapesSentence(results), "Each model server is scraped 20.0 times a second by one replica; with shared scraping 20.0 at 3 and 20.1 at 8 replicas, against 60.0 at 3 when every replica scrapes it."; got != want {
		t.Errorf("scrapes sentence:\n%s\nwant\n%s", got, want)
	}
}

// TestEfficiencyIsMetOnlyWhenThePassesAgree: three passes whose rounds agree
// within each pass but not between them clear the target over the rounds, not
// between the passes; so the figure is not shown. The passes' windows merge with
// their rounds kept apart.
func TestEfficiencyIsMetOnlyWhenThePassesAgree(t *testing.T) {
	var all []capacityResult
	for pass, eff := range []float64{1.0, 0.92, 0.95} {
		sub, ref := fakeRounds(8, 0.3, 0.002/eff, []float64{0}), fakeRounds(1, 0.04, 0.002, []float64{0})
		for _, ps := range [][]capacityPoint{sub, ref} {
			for i := range ps {
				ps[i].pass, ps[i].round = pass, 2*pass+ps[i].round
			}
		}
		all = mergePass(all, []capacityResult{{config: "shared-index-default", replicas: 8, points: sub, ref: ref, scrapes: float64(20 + pass)}})
	}
	r := all[0]
	if in := r.efficiency(); in.N != 6 || in.shown(1/targetMarginal) != "met" {
		t.Fatalf("over the rounds: %+v, want 6 rounds that clear %.2f", in, 1/targetMarginal)
	}
	if b := r.betweenPasses(capacityResult.efficiency); b.N != 3 || math.Abs(b.Mean-(1.0+0.92+0.95)/3) > 1e-9 || b.Lo >= 1/targetMarginal {
		t.Fatalf("between passes: %+v, want the 3 passes' mean with an interval that reaches below %.2f", b, 1/targetMarginal)
	}
	if got := r.efficiencyShown(); got != "not shown" {
		t.Errorf("shown: %q, want not shown", got)
	}
	if r.scrapes != 21 {
		t.Errorf("scrapes %v, want the passes' mean 21", r.scrapes)
	}
}
