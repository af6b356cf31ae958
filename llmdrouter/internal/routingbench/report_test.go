package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/routingbench/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/routingbench/workload"
)

// fakeBench is a bench with results made up for one workload and size: hit rate
// hit(config, replicas) for every seed.
func fakeBench(t *testing.T, hit func(config string, n int) float64) *bench {
	t.Helper()
	o, err := parseRunOptions([]string{"--epp=" + os.Args[0], "--workloads=multi-turn", "--sizes=fits", "--seeds=2"})
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
			if c.pending {
				continue
			}
			for _, n := range counts {
				r := result{config: c.name, title: c.title, replicas: n, kind: workload.MultiTurn, size: sizeFits, seed: seed,
					ref: reference{blind: 0.2, ceiling: 0.9}, want: 10, sent: 10, answered: 10, reuse: 8, precise: 8 / n, followUps: 8, sameServer: 8 / n,
					ttft: []time.Duration{time.Duration(n) * 100 * time.Millisecond}, wall: time.Second, cpu: 10 * time.Millisecond,
					server: modelsim.Stats{Requests: 10, PromptTokens: 1000, CachedTokens: int64(1000 * hit(c.name, n)), Steps: 100}}
				b.results = append(b.results, r)
			}
		}
	}
	return b
}

func TestReportTablesAndPlot(t *testing.T) {
	b := fakeBench(t, func(config string, n int) float64 { return 0.8 / float64(n) })
	rep := b.report(time.Minute)
	for _, want := range []string{
		"| one replica | 1 | 0.800 | 1.00 | 1.00 |",
		"| LocalSyncer (nothing shared) | 3 | 0.266 |",
		"| peer-syncer (in-flight load shared) | 8 | 0.100 |",
		"| shared prefix index (issue 31) | – | not measured: not built yet |",
		"Prefix-blind routing (each request to a server at random) would hit 0.200",
		"LocalSyncer (nothing shared) × 8: 0.100 (-88%)",
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
	if lines != 2*2 { // LocalSyncer and peer-syncer, hit rate and TTFT
		t.Errorf("%d lines in the plot, want 4", lines)
	}
	if dir := os.Getenv("ROUTINGBENCH_PLOT_DIR"); dir != "" { // to look at it
		_ = os.WriteFile(dir+"/routing-bench-test.svg", []byte(rep.svg), 0o644)
	}
}

func TestSmokeCheckFailsOnLostRequestsAndALowHitRate(t *testing.T) {
	b := fakeBench(t, func(string, int) float64 { return 0.6 })
	if err := b.smokeCheck(); err != nil {
		t.Fatalf("a run that adds up: %v", err)
	}
	b = fakeBench(t, func(config string, _ int) float64 {
		if config == "single" {
			return 0.5 // below 0.55, halfway from prefix-blind routing's 0.2 to the ceiling 0.9
		}
		return 0.6
	})
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "not above 0.550") {
		t.Errorf("one replica below the floor: %v", err)
	}
	b = fakeBench(t, func(string, int) float64 { return 0.6 })
	b.results[0].answered = 9
	b.results[0].check()
	if err := b.smokeCheck(); err == nil || !strings.Contains(err.Error(), "9 answered") {
		t.Errorf("a request not answered: %v", err)
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
