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
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
)

// fakeBench is a bench with results made up for one workload and size: hit rate
// hit(config, replicas, seed).
func fakeBench(t *testing.T, hit func(config string, n int, seed uint64) float64) *bench {
	t.Helper()
	o, err := parseRunOptions([]string{"--epp=" + os.Args[0], "--workloads=multi-turn", "--sizes=fits", "--seeds=3", "--control-seeds=2",
		"--configs=single,single-shared,single-active,single-peer,local,peer,shared-index-default,shared-index"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, refs: map[refKey]reference{}}
	for _, seed := range o.seeds {
		b.refs[refKey{workload.MultiTurn, sizeFits, seed}] = reference{blind: 0.2, ceiling: 0.9}
		for _, c := range o.configs {
			counts := o.replicas
			if c.single {
				counts = []int{1}
			}
			for _, n := range counts {
				if seed > uint64(len(o.seedsOf(c))) {
					continue
				}
				precise := 8 / n
				if c.sharesIndex && n == 3 {
					precise = 8
				}
				r := result{config: c.name, title: c.title, replicas: n, kind: workload.MultiTurn, size: sizeFits, seed: seed,
					ref: reference{blind: 0.2, ceiling: 0.9}, want: 10, sent: 10, answered: 10, reuse: 8, precise: precise, followUps: 8, sameServer: 8 / n,
					ttft: []time.Duration{time.Duration(n) * 100 * time.Millisecond}, route: []time.Duration{time.Duration(n) * time.Millisecond}, wall: time.Second, cpu: 10 * time.Millisecond,
					server: modelsim.Stats{Requests: 10, PromptTokens: 1000, CachedTokens: int64(math.Round(1000 * hit(c.name, n, seed))), Steps: 100}}
				if c.syncs {
					r.sync.sentBytes = 3000 * float64(n)
				}
				if c.sharesIndex { // 10 placements of 80 bytes, each merged by the n-1 peers in 12 ms
					r.sync.placementBytes = histogram{bounds: []float64{64, 128, math.Inf(1)}, cumulative: []float64{0, 10, 10}, count: 10, sum: 800}
					r.sync.propagation = histogram{bounds: []float64{0.008, 0.016, math.Inf(1)}, cumulative: []float64{0, 10 * float64(n-1), 10 * float64(n-1)}, count: 10 * float64(n-1), sum: 0.012 * 10 * float64(n-1)}
					r.sync.merged = map[string]float64{"peer": 10 * float64(n-1)}
				}
				b.results = append(b.results, r)
			}
		}
	}
	for _, c := range o.configs {
		counts := o.replicas
		if c.single {
			counts = []int{1}
		}
		for _, n := range counts {
			f := footprint{config: c.name, title: c.title, replicas: n}
			for range n {
				f.rss, f.peak = append(f.rss, 80<<20), append(f.peak, 90<<20)
				if c.sharesIndex {
					f.blocks = append(f.blocks, 1200)
				}
			}
			b.footprints = append(b.footprints, f)
		}
	}
	return b
}

func TestReportTablesAndPlot(t *testing.T) {
	// One replica hits 0.800, 0.790 and 0.810 on seeds 1 to 3; the shared index
	// 0.99 of it on every seed at 3 replicas, and 0.96, 0.99, 0.93 at 8 (a mean
	// ratio of 0.96 whose interval reaches above 0.97).
	single := map[uint64]float64{1: 0.8, 2: 0.79, 3: 0.81}
	at8 := map[uint64]float64{1: 0.96, 2: 0.99, 3: 0.93}
	b := fakeBench(t, func(config string, n int, seed uint64) float64 {
		switch config {
		case "single":
			return single[seed]
		case "shared-index", "shared-index-default":
			if n == 8 {
				return single[seed] * at8[seed]
			}
			return single[seed] * 0.99
		case "single-active", "single-peer":
			return 0.76
		}
		return 0.8 / float64(n)
	})
	b.restarts = []restartResult{{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 1,
		phases: []phase{{name: "before", from: 20 * time.Second, to: 40 * time.Second, requests: 10, prompt: 1000, cached: 700, reuse: 8, precise: 8},
			{name: "during", from: 40 * time.Second, to: 70 * time.Second, requests: 10, prompt: 1000, cached: 650, reuse: 8, precise: 6},
			{name: "after", from: 70 * time.Second, to: 120 * time.Second, requests: 10, prompt: 1000, cached: 690, reuse: 8, precise: 8}},
		replaced: []replacement{{old: "a", new: "d", ready: 2 * time.Second, bootstraps: true, warm: true, warmAfterListed: 80 * time.Millisecond, routed: 100, routedCold: 2},
			{old: "b", new: "e", ready: 2 * time.Second, bootstraps: true, warm: true, warmAfterListed: 120 * time.Millisecond, routed: 100, routedCold: 3},
			{old: "c", new: "f", ready: 2 * time.Second, bootstraps: true, routed: 100, routedCold: 100}}},
		{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 1, baseline: true,
			phases: []phase{{name: "before", from: 20 * time.Second, to: 40 * time.Second, requests: 10, prompt: 1000, cached: 710, reuse: 8, precise: 8},
				{name: "during", from: 40 * time.Second, to: 70 * time.Second, requests: 10, prompt: 1000, cached: 700, reuse: 8, precise: 8},
				{name: "after", from: 70 * time.Second, to: 120 * time.Second, requests: 10, prompt: 1000, cached: 690, reuse: 8, precise: 7}}}}
	b.faultResults = []faultResult{
		{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 1, fault: faultFreeze, agreed: 40 * time.Millisecond, repaired: 12,
			window: phase{requests: 10, prompt: 1000, cached: 700}},
		{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 1, fault: faultFreeze, baseline: true,
			window: phase{requests: 10, prompt: 1000, cached: 710}},
		{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 2, fault: faultFreeze, agreed: 3 * time.Second, repaired: 20, lost: [3]int{0, 1, 0},
			window: phase{requests: 10, prompt: 1000, cached: 690}},
		{config: "shared-index", title: "shared prefix index", replicas: 3, seed: 2, fault: faultFreeze, baseline: true,
			window: phase{requests: 10, prompt: 1000, cached: 700}},
	}
	rep := b.report(time.Minute)
	for _, want := range []string{
		"| one replica | 1 | 0.800 (0.790–0.810) | 1.00 | 1.00 |",
		"| LocalSyncer (nothing shared) | 3 | 0.267 |",
		"| peer-syncer (in-flight load shared) | 8 | 0.100 |",
		"Prefix-blind routing (each request to a server at random) would hit 0.200",
		"3 seeds per case (2 for one replica + shared prefix index (control), one replica + active-request-scorer (control), one replica + peer-syncer + active-request-scorer (control), LocalSyncer (nothing shared), peer-syncer (in-flight load shared), on multi-turn only, to keep the bench within its time)",
		// What the replicas use and send.
		"| LocalSyncer (nothing shared) | 3 | 0.0% | 0.3% | – | – | – | – | – | – | – | 80 MiB (90 MiB) | – |",
		"| shared prefix index | 8 | 0.0% | 0.1% | 2.9 KiB/s | 2.3 KiB | 80 B | 1.00 | 210 of 210 | 12 ms (≤ 16 ms) | 16 ms (≤ 16 ms) | 80 MiB (90 MiB) | 1200 |",
		// The targets: paired ratios, met at 3 replicas (0.99 on every seed), not
		// shown at 8 (0.96, 0.99, 0.93: an interval from 0.885 to 1.035).
		"shown in 2 of 4 cases",
		"| shared prefix index | multi-turn, fits | 3 | 0.792 [0.767, 0.817] | 0.800 [0.775, 0.825] | 0.990 [0.990, 0.990]: met |",
		"| shared prefix index | multi-turn, fits | 8 | 0.768 [0.732, 0.804] | 0.800 [0.775, 0.825] | 0.960 [0.885, 1.035]: not shown |",
		"| 1.00 [1.00, 1.00]: met | 16 ms (≤ 16 ms): met |",
		// The state-sync profile against single-active.
		"| multi-turn, fits | one replica + peer-syncer + active-request-scorer (control) | 1 | 0.760 [0.760, 0.760] | 1.000 [1.000, 1.000] |",
		// The headline.
		"routing-headline:begin",
		"replicas that share the prefix index hit it 0.990 [0.990, 0.990] at 3 and 0.960 [0.885, 1.035] at 8 times as often as one replica does on upstream's default profile",
		"at least 0.97× is shown in 2 of 4 cases",
		// The faults.
		"| shared prefix index | 3 | freeze | 1 | 40 ms: met | 12 | 0: met | 0, 0, 0; 0 | 0.700 (0.710); 10 (10) | 0.986 | 0 |",
		"| shared prefix index | 3 | freeze | 2 | 3.00 s: **missed** | 20 | 0: met | 0, 1, 0; 0 | 0.690 (0.700); 10 (10) | 0.986 | 0 |",
		"| freeze | 2 | **missed** | 0.986 [0.985, 0.987]: met |",
		// The rolling restart.
		"| shared prefix index | 3 | 1 | 0.700, 1.00 (20–40 s) | 0.650, 0.75 (40–70 s) | 0.690, 1.00 (70–120 s) | 2.00 s–2.00 s | 2 of 3 (80 ms–120 ms) | 105 of 300 | 0 |",
		"| shared prefix index, no restart (baseline) | 3 | 1 | 0.710, 1.00 (20–40 s) | 0.700, 1.00 (40–70 s) | 0.690, 0.88 (70–120 s) | – | – | – | 0 |",
	} {
		if !strings.Contains(rep.markdown, want) {
			t.Errorf("the report lacks %q:\n%s", want, rep.markdown)
		}
	}
	// The plot is well-formed SVG with a line per measured configuration and panel.
	d := xml.NewDecoder(strings.NewReader(rep.svg))
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v\n%s", err, rep.svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4*2 { // LocalSyncer, peer-syncer and the shared index on both profiles, hit rate and TTFT
		t.Errorf("%d lines in the plot, want 8", lines)
	}
	if dir := os.Getenv("ROUTINGBENCH_PLOT_DIR"); dir != "" { // to look at it
		_ = os.WriteFile(dir+"/routing-bench-test.svg", []byte(rep.svg), 0o644)
	}
}

func TestSmokeCheckFailsOnLostRequestsAndALowHitRate(t *testing.T) {
	sharing := func(config string, _ int, _ uint64) float64 {
		if strings.HasPrefix(config, "shared-index") {
			return 0.7
		}
		return 0.6
	}
	b := fakeBench(t, sharing)
	if err := b.smokeCheck(); err != nil {
		t.Fatalf("a run that adds up: %v", err)
	}
	b = fakeBench(t, func(config string, n int, seed uint64) float64 {
		if config == "single" {
			return 0.5 // below 0.55, halfway from prefix-blind routing's 0.2 to the ceiling 0.9
		}
		return sharing(config, n, seed)
	})
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "not above 0.550") {
		t.Errorf("one replica below the floor: %v", err)
	}
	b = fakeBench(t, sharing)
	b.results[0].answered = 9
	b.results[0].check()
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "9 answered") {
		t.Errorf("a request not answered: %v", err)
	}
	// An index that publishes but does not change routing: as LocalSyncer.
	b = fakeBench(t, func(string, int, uint64) float64 { return 0.6 })
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "shared prefix index, default profile hits 0.600, LocalSyncer 0.600: want 0.07 more") {
		t.Errorf("a shared index that does not share: %v", err)
	}
	// On either profile.
	b = fakeBench(t, func(config string, n int, seed uint64) float64 {
		if config == "shared-index-default" {
			return 0.6
		}
		return sharing(config, n, seed)
	})
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "default profile hits 0.600") || strings.Contains(err.Error(), "state sync") {
		t.Errorf("the default profile's index that does not share, the other that does: %v", err)
	}
}

func TestCheckComparesTheServersWithTheGenerator(t *testing.T) {
	r := result{want: 2, sent: 2, answered: 2, genPrompt: 100, srvPrompt: 100, srvCached: 40,
		server: modelsim.Stats{Requests: 2, PromptTokens: 100, CachedTokens: 40}}
	r.check()
	if len(r.problems) != 0 {
		t.Fatalf("accounting that adds up: %v", r.problems)
	}
	r.server.CachedTokens = 39
	r.check()
	if len(r.problems) != 1 || !strings.Contains(r.problems[0], "39 cached") {
		t.Errorf("servers counting another number of cached tokens: %v", r.problems)
	}
}

func TestCheckSharingCountsEveryPeer(t *testing.T) {
	r := result{answered: 10}
	r.sync.placementBytes.count = 4
	r.sync.merged = map[string]float64{"peer": 8}
	r.checkSharing(3)
	if len(r.problems) != 0 {
		t.Fatalf("4 placements, merged by each of 2 peers: %v", r.problems)
	}
	r.sync.merged["peer"] = 7
	r.sync.droppedBy = map[string]float64{"not-in-pool": 1}
	r.checkSharing(3)
	if len(r.problems) != 2 || !strings.Contains(r.problems[0], "4 placements published, 7 merged by the peers: want 2 × 4") || !strings.Contains(r.problems[1], "1 placements dropped (not-in-pool)") {
		t.Errorf("a placement that one peer dropped: %v", r.problems)
	}
	r = result{answered: 10, sync: replicaMetrics{merged: map[string]float64{}}}
	r.checkSharing(3)
	if len(r.problems) != 1 || !strings.Contains(r.problems[0], "no placement published") {
		t.Errorf("no placement at all: %v", r.problems)
	}
}

// TestHeadlineClaimsOnlyWhatRan: the smoke runs one seed, 3 replicas, and neither
// shared-index-default nor 8 replicas; its headline says so, with no empty figure.
func TestHeadlineClaimsOnlyWhatRan(t *testing.T) {
	b := fakeBench(t, func(config string, _ int, _ uint64) float64 {
		if config == "single" {
			return 0.8
		}
		return 0.6
	})
	var kept []result
	for _, r := range b.results {
		if r.seed == 1 && (r.config == "single" || r.config == "local" || r.config == "shared-index") && (r.replicas == 1 || r.replicas == 3) {
			kept = append(kept, r)
		}
	}
	b.results, b.o.replicas = kept, []int{3}
	got := b.headline()
	want := "On the multi-turn workload that fits (1 seed), one replica hits the prompt cache 0.800 (1 seed) of the time; " +
		"replicas that share the prefix index hit it 0.750 (1 seed) at 3 times as often as one replica does with state sync's profile (`active-request-scorer`); " +
		"replicas that share nothing (`LocalSyncer`), 0.750 (1 seed) at 3. Each ratio"
	if !strings.HasPrefix(got, want) {
		t.Errorf("headline:\n%s\nwant it to begin:\n%s", got, want)
	}
}

// TestRestartRatiosArePairedBySeed: each seed's hit rate during and after the
// rolling restart is divided by its own baseline's in the same phase (a seed whose
// workload hits less does so with or without the restart), and the target is
// decided by the interval.
func TestRestartRatiosArePairedBySeed(t *testing.T) {
	phases := func(before, during, after float64) []phase {
		var out []phase
		for _, h := range []float64{before, during, after} {
			out = append(out, phase{requests: 100, prompt: 1000, cached: int64(1000 * h)})
		}
		return out
	}
	var runs []restartResult
	for seed, base := range map[uint64]float64{1: 0.8, 2: 0.6, 3: 0.7} {
		runs = append(runs,
			restartResult{config: "shared-index", title: "shared prefix index", seed: seed, phases: phases(base, base*0.99, base*0.98)},
			restartResult{config: "shared-index", title: "shared prefix index", seed: seed, baseline: true, phases: phases(base, base, base)},
			restartResult{config: "local", title: "LocalSyncer", seed: seed, phases: phases(0.5, 0.4, 0.4)}) // no baseline: no ratio
	}
	got := restartRatios(runs)
	want := "| shared prefix index | 3 | 0.990 [0.990, 0.990]: met | 0.980 [0.980, 0.980]: met |"
	if !strings.Contains(got, want) || strings.Contains(got, "LocalSyncer") {
		t.Fatalf("restart ratios:\n%s\nwant the row %q and no row without a baseline", got, want)
	}
}

// TestHeadlineSaysWhereFewerSeedsRan: a ratio of a control run with fewer seeds
// than one replica says how many; the rows with every seed do not repeat it.
func TestHeadlineSaysWhereFewerSeedsRan(t *testing.T) {
	b := fakeBench(t, func(config string, _ int, _ uint64) float64 {
		if config == "single" {
			return 0.8
		}
		return 0.6
	})
	got := b.headline()
	if !strings.HasPrefix(got, "On the multi-turn workload that fits (3 seeds)") {
		t.Fatalf("headline: %s", got)
	}
	_, local, _ := strings.Cut(got, "(`LocalSyncer`), ")
	if !strings.Contains(local, "at 3 (2 seeds)") || strings.Contains(strings.Split(got, "(`LocalSyncer`)")[0], "seeds) and") {
		t.Errorf("headline: %s\nwant LocalSyncer's ratios (2 control seeds) to say so, and the shared index's (3) not", got)
	}
}
