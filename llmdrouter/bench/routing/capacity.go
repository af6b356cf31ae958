package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/cputime"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
)

// The capacity mode (routingbench capacity, make bench-capacity): what one more
// request costs the EPP replicas, all of them together, at 1, 3 and 8 replicas.
// The model servers answer at once (stubServer: the same API and metrics as
// modelsim, no cost), so that the machine's CPU goes to the EPPs. The replicas'
// CPU is read from /proc/<pid>/stat (utime and stime, threads that exited
// included) over windows of open-loop load at several rates, and idle ones (rate
// 0). The marginal cost per request is the slope of the replicas' CPU (cores)
// against the rate (requests a second), with its 95% interval.
//
// The machine drifts (other tenants, frequency) by more than the effect to
// measure, so one replica, the reference, stays up for the whole bench, and every
// other configuration runs beside it in a session of rounds: in each round, every
// rate (idle included) in a shuffled order, one window on the reference and one on
// the configuration, back to back, which goes first alternating. A round's
// scaling efficiency is the reference's slope over the configuration's, both
// fitted on that round's windows; the efficiency is the mean of the rounds', with
// its interval. Drift slower than a round cancels out.

type capacityOptions struct {
	refresh time.Duration        // the EPPs' --refresh-metrics-interval (0: upstream's default)
	page    modelsim.MetricsPage // what the stubs' /metrics renders
	epp     string
	// baseline is another EPP build (--baseline-epp) each configuration also runs on.
	baseline string
	// peerClockOffset bounds the emulated peers' clock offsets (echoOptions).
	peerClockOffset time.Duration
	configs         []configuration
	replicas        []int
	rates           []float64
	window          time.Duration
	rounds          int
	passes          int
	pass            int // the pass running (capacitySessions)
	servers         int
	write           string
	quote           []string
	plot            string
	pprofDir        string
	scrape          scrapeLoadOptions
	// measuredBy is the command the report names as its source.
	measuredBy string
}

func parseCapacityOptions(args []string) (capacityOptions, error) {
	fs := flag.NewFlagSet("capacity", flag.ExitOnError)
	var o capacityOptions
	fs.StringVar(&o.epp, "epp", "", "the EPP build (bin/epp-llmd)")
	fs.StringVar(&o.baseline, "baseline-epp", "", "another EPP build to compare with (an earlier commit's bin/epp-llmd): each configuration of --configs but single also runs on it, right after itself in each pass and beside the same reference, and the report gives this build's scaling efficiency over the baseline's, paired by round")
	configs := fs.String("configs", "single,single-shared,single-shared-state-sync,local,peer,shared-index-default,shared-index-loaded,shared-index,shared-index-loaded-state-sync,shared-scraping", "configurations (of run's, and the shared-index-loaded ones: one replica of N, its peers emulated at its rate): single runs 1 replica (the reference every other one is paired with), and so do the other single ones (single-shared: the shared index without a peer, the reference the full-rate rows isolate the sharing against), the others --replicas")
	replicas := fs.String("replicas", "3,8", "replica counts of the active-active configurations")
	rates := fs.String("rates", "50,100,200,400,600", "open-loop request rates, in requests a second over every replica together (at least 2; with the idle windows, a slope has 3 points or more); the cost of a request is given at each (the curve)")
	fs.DurationVar(&o.peerClockOffset, "peer-clock-offset", time.Millisecond, "the emulated peers' clocks (one replica of N at the full rate): each is this machine's plus an offset drawn evenly from [-this, this], so that their frames arrive as those of replicas on nodes of their own do (the default is an assumption: docs/DECISIONS.md)")
	fs.DurationVar(&o.window, "window", 2500*time.Millisecond, "each window (a rate's, or an idle one)")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds per configuration and pass: each rate and an idle window, on the configuration and on the reference")
	fs.IntVar(&o.passes, "passes", 3, "independent passes: each starts every fleet, the reference's included, afresh and runs every configuration again; the spread between them is reported beside the interval over the rounds")
	fs.IntVar(&o.servers, "servers", 8, "model servers (stubs that answer at once)")
	fs.DurationVar(&o.refresh, "refresh-metrics-interval", 0, "the EPPs' --refresh-metrics-interval (0: upstream's default, 50ms); the scrapes and their cost scale with its inverse")
	o.page = modelsim.CorePage // DECISIONS: "The model servers' metrics page"
	fs.Func("metrics-page", fmt.Sprintf("what each server's /metrics renders: %q (a vLLM v1 server's page, histograms included) or %q (the families llm-d-router reads; the default)", modelsim.VLLMPage, modelsim.CorePage),
		func(v string) error { o.page = modelsim.MetricsPage(v); return stubConfig(o.page).Validate() })
	fs.IntVar(&o.scrape.servers, "scrape-servers", 32, "the scrape load's model servers (0: no scrape load section)")
	fs.IntVar(&o.scrape.replicas, "scrape-replicas", 8, "the scrape load's replicas, of each of its two fleets")
	fs.DurationVar(&o.scrape.refresh, "scrape-refresh", time.Second, "the scrape load's --refresh-metrics-interval (at 50ms, the whole page on 32 servers at 8 replicas is more than 2 cores parse)")
	o.scrape.page = modelsim.VLLMPage
	fs.Func("scrape-page", fmt.Sprintf("the scrape load's /metrics page: %q (the default) or %q", modelsim.VLLMPage, modelsim.CorePage),
		func(v string) error {
			o.scrape.page = modelsim.MetricsPage(v)
			return stubConfig(o.scrape.page).Validate()
		})
	fs.IntVar(&o.scrape.windows, "scrape-windows", 8, "the scrape load's idle windows")
	fs.DurationVar(&o.scrape.window, "scrape-window", 5*time.Second, "each of the scrape load's windows")
	fs.StringVar(&o.write, "write", "", "write the table into this markdown file, between the capacity-bench markers")
	quote := fs.String("quote", "", "with --write, write the capacity headline also into these markdown files (comma-separated), between the capacity-headline markers")
	fs.StringVar(&o.plot, "plot", "", "write the plot (SVG) of requests per core against replicas to this file")
	fs.StringVar(&o.pprofDir, "pprof-dir", "", "write a CPU profile of each replica of each configuration over its last window at the highest rate here, a file a replica (the EPP's /debug/pprof/profile; go tool pprof merges them)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.measuredBy = makeInvocation("bench-capacity", "BENCH_CAPACITY_FLAGS", fs, "epp", "write", "quote", "plot")
	for _, name := range splitList(*configs) {
		c, err := configurationNamed(name)
		if err != nil {
			return o, fmt.Errorf("--configs: %w", err)
		}
		o.configs = append(o.configs, c)
		if o.baseline != "" && !c.single {
			o.configs = append(o.configs, c.onBaseline(o.baseline))
		}
	}
	var err error
	if o.replicas, err = replicaCounts(*replicas); err != nil {
		return o, err
	}
	for _, f := range splitList(*rates) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return o, fmt.Errorf("--rates=%q: want positive rates, comma-separated", *rates)
		}
		o.rates = append(o.rates, r)
	}
	o.quote = splitList(*quote)
	switch {
	case o.epp == "":
		return o, errors.New("--epp: the EPP build is required (make build-llmd builds bin/epp-llmd)")
	case len(o.rates) < 2:
		return o, fmt.Errorf("--rates=%q: want at least 2 rates (with the idle windows, a slope per round needs 3 points)", *rates)
	case o.window < time.Second:
		return o, fmt.Errorf("--window=%v: want at least 1s", o.window)
	case o.peerClockOffset < 0 || o.peerClockOffset > time.Second:
		return o, fmt.Errorf("--peer-clock-offset=%v: want 0 to 1s", o.peerClockOffset)
	case o.rounds < 2 || o.rounds > 30:
		return o, fmt.Errorf("--rounds=%d: want 2 to 30 (an interval needs 2)", o.rounds)
	case o.passes < 1 || o.passes > 10:
		return o, fmt.Errorf("--passes=%d: want 1 to 10 (a spread between passes needs 2)", o.passes)
	case o.servers < 1 || o.servers > 100:
		return o, fmt.Errorf("--servers=%d: want 1 to 100", o.servers)
	case o.scrape.servers < 0 || o.scrape.servers > 100:
		return o, fmt.Errorf("--scrape-servers=%d: want 0 (no scrape load) to 100", o.scrape.servers)
	case o.scrape.servers > 0 && (o.scrape.replicas < 2 || o.scrape.replicas > 16):
		return o, fmt.Errorf("--scrape-replicas=%d: want 2 to 16 (shared scraping needs a peer)", o.scrape.replicas)
	case o.scrape.servers > 0 && (o.scrape.windows < 2 || o.scrape.window < time.Second || o.scrape.refresh < 0):
		return o, fmt.Errorf("--scrape-windows=%d, --scrape-window=%v, --scrape-refresh=%v: want 2 windows or more (an interval), of 1s or more, and an interval of 0 (upstream's default) or more",
			o.scrape.windows, o.scrape.window, o.scrape.refresh)
	}
	if _, err := os.Stat(o.epp); err != nil {
		return o, fmt.Errorf("--epp=%s: %w", o.epp, err)
	}
	if _, err := os.Stat(o.baseline); o.baseline != "" && err != nil {
		return o, fmt.Errorf("--baseline-epp=%s: %w", o.baseline, err)
	}
	return o, nil
}

// capacityPoint is one window: the rate sent (0: idle), the replicas' CPU over it
// (cores, every replica together), what was answered, and the EPP's picking times.
type capacityPoint struct {
	rate     float64 // the rate asked (the fit uses the rate achieved)
	pass     int     // which pass (fresh processes each)
	session  int     // which configuration's session (the reference runs in each)
	round    int     // numbered across passes: pass × rounds + the round in the pass
	cores    float64
	perCore  []float64 // each replica's cores
	sent     int
	answered int
	route    []time.Duration
	wall     time.Duration
}

// capacityResult is one configuration and replica count.
type capacityResult struct {
	config, title string
	replicas      int
	points        []capacityPoint
	// ref is the reference's windows of this configuration's session, the same
	// rounds (none for the reference itself).
	ref []capacityPoint
	// scrapes is the model servers' /metrics requests per server and second from
	// this configuration's replicas.
	scrapes float64
	failure string
}

// fit is the least-squares line of cores against rate over every window: its
// slope (core-seconds per request: the marginal cost) with its 95% interval, and
// its intercept (cores with no request). The rate is the one achieved: a window
// whose requests took longer than the window to send and answer counts them over
// the time they took, as its CPU is.
func (r capacityResult) fit() (slope interval, intercept float64) { return fitPoints(r.points) }

// achieved is the requests answered a second over the time the window took (its
// rate asked, when the window's time is not known, and 0 for an idle one).
func (p capacityPoint) achieved() float64 {
	if p.rate > 0 && p.wall > 0 {
		return float64(p.answered) / p.wall.Seconds()
	}
	return p.rate
}

func fitPoints(points []capacityPoint) (slope interval, intercept float64) {
	xs, ys := make([]float64, len(points)), make([]float64, len(points))
	for i, p := range points {
		xs[i], ys[i] = p.achieved(), p.cores
	}
	s, a := stats.Line(xs, ys)
	return interval{s}, a
}

// efficiency is the scaling efficiency paired in time: per round, the reference's
// slope over this configuration's, both fitted on that round's windows; their mean
// with its interval (no samples without a reference).
func (r capacityResult) efficiency() interval {
	byRound := r.roundEfficiencies()
	var ratios []float64
	for _, k := range slices.Sorted(maps.Keys(byRound)) {
		ratios = append(ratios, byRound[k])
	}
	return meanInterval(ratios)
}

// roundEfficiencies are the scaling efficiencies of r's rounds, by round.
func (r capacityResult) roundEfficiencies() map[int]float64 {
	out := map[int]float64{}
	for _, p := range r.points {
		if _, done := out[p.round]; done {
			continue
		}
		mine, ref := inRound(r.points, p.round), inRound(r.ref, p.round)
		if len(mine) == 0 || len(ref) == 0 {
			continue
		}
		s, _ := fitPoints(mine)
		s1, _ := fitPoints(ref)
		if s.Mean > 0 {
			out[p.round] = s1.Mean / s.Mean
		}
	}
	return out
}

// over is r's scaling efficiency over other's: per round (the same round of the
// same pass, each paired with the reference's windows of its own session), the
// ratio of the two; their mean with its 95% interval. Other is the same
// configuration on the baseline build (--baseline-epp: above 1, this build costs
// less per request), or one replica of the same profile (isolatedBy: what the
// sharing alone costs).
func (r capacityResult) over(other capacityResult) interval {
	mine, theirs := r.roundEfficiencies(), other.roundEfficiencies()
	var ratios []float64
	for _, k := range slices.Sorted(maps.Keys(mine)) {
		if b, ok := theirs[k]; ok && b > 0 {
			ratios = append(ratios, mine[k]/b)
		}
	}
	return meanInterval(ratios)
}

// costAt is the CPU a request costs at rate (the rate asked, every replica
// together), above idle: per round, the cores of the window at rate less those of
// the same round's idle window, over the rate achieved; the mean over the rounds,
// with its 95% interval. Unlike the slope over every rate, it says what a request
// costs at that rate: with fewer requests a second, the fixed work of each
// (waking up, batching the broadcast) is shared by fewer.
func (r capacityResult) costAt(rate float64) interval {
	type key struct{ session, round int }
	idle, at := map[key]capacityPoint{}, map[key]capacityPoint{}
	for _, p := range r.points {
		switch p.rate {
		case 0:
			idle[key{p.session, p.round}] = p
		case rate:
			at[key{p.session, p.round}] = p
		}
	}
	var vs []float64
	for k, p := range at {
		if i, ok := idle[k]; ok && p.achieved() > 0 {
			vs = append(vs, (p.cores-i.cores)/p.achieved())
		}
	}
	slices.Sort(vs) // the map's order must not move the mean's last digit
	return meanInterval(vs)
}

// perReplica is the rate each measured replica routes when the fleet gets rate:
// all of it for one replica and for one replica of N at its full rate, an N-th
// when the rate is spread.
func (r capacityResult) perReplica(rate float64) float64 {
	if c, err := configurationNamed(r.config); err == nil && c.emulatedPeers {
		return rate
	}
	return rate / float64(max(1, r.replicas))
}

// mergePass adds a pass's results to those of the passes before (the same
// configurations, in the same order): its windows, the mean of the scrapes, and
// a failure in any pass.
func mergePass(all, pass []capacityResult) []capacityResult {
	if len(all) == 0 {
		return pass
	}
	for i := range all {
		n := float64(all[i].passes())
		all[i].points = append(all[i].points, pass[i].points...)
		all[i].ref = append(all[i].ref, pass[i].ref...)
		all[i].scrapes = (all[i].scrapes*n + pass[i].scrapes) / (n + 1)
		if all[i].failure == "" {
			all[i].failure = pass[i].failure
		}
	}
	return all
}

// passes is how many passes r has windows of.
func (r capacityResult) passes() int {
	n := 0
	for _, p := range r.points {
		n = max(n, p.pass+1)
	}
	return n
}

// inPass is r with only the windows of pass k.
func (r capacityResult) inPass(k int) capacityResult {
	only := func(ps []capacityPoint) []capacityPoint {
		var out []capacityPoint
		for _, p := range ps {
			if p.pass == k {
				out = append(out, p)
			}
		}
		return out
	}
	r.points, r.ref = only(r.points), only(r.ref)
	return r
}

// betweenPasses is the spread of a figure between the passes: f of each pass
// alone, their mean and 95% interval. Fresh processes, and the machine's state of
// the moment, move a figure between runs more than between the rounds of one.
func (r capacityResult) betweenPasses(f func(capacityResult) interval) interval {
	var vs []float64
	for k := range r.passes() {
		if v := f(r.inPass(k)); v.N > 0 {
			vs = append(vs, v.Mean)
		}
	}
	return meanInterval(vs)
}

// idle is the mean of the idle windows' cores, per replica.
func (r capacityResult) idle() float64 {
	var sum float64
	k := 0
	for _, p := range r.points {
		if p.rate == 0 {
			sum += p.cores / float64(max(1, len(p.perCore))) // the replicas measured
			k++
		}
	}
	if k == 0 {
		return math.NaN()
	}
	return sum / float64(k)
}

// top is the highest rate's windows together: their picking times and counts.
func (r capacityResult) top() capacityPoint {
	var best capacityPoint
	for _, p := range r.points {
		switch {
		case p.rate > best.rate:
			best = capacityPoint{rate: p.rate, sent: p.sent, answered: p.answered, route: slices.Clone(p.route)}
		case p.rate == best.rate && p.rate > 0:
			best.sent += p.sent
			best.answered += p.answered
			best.route = append(best.route, p.route...)
		}
	}
	return best
}

func capacityMain(args []string) error {
	o, err := parseCapacityOptions(args)
	if err != nil {
		return err
	}
	builds := []string{o.epp}
	if o.baseline != "" {
		builds = append(builds, o.baseline)
	}
	stamp, err := markdown.StampOf(builds...) // before the namespace, at the start
	if err != nil {
		return err
	}
	netns.Isolate("routingbench capacity")
	env, err := testenv.Start(testenv.WithoutFsync())
	if err != nil {
		return err
	}
	defer env.Stop()
	stubs, err := startStubs(o.servers, o.page)
	if err != nil {
		return err
	}
	defer stubs.close()
	b := &bench{o: runOptions{epp: o.epp, servers: o.servers, refresh: o.refresh}, env: env, servers: stubs.byAddr, scrapeCounts: stubs.scrapes,
		logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "routingbench capacity: "+f+"\n", a...) }}
	start := time.Now()
	var results []capacityResult
	for pass := range o.passes {
		o.pass = pass
		b.logf("pass %d of %d", pass+1, o.passes)
		results = mergePass(results, b.capacitySessions(o, stubs))
	}
	stubs.close() // the scrape load's servers take their addresses
	var scrape scrapeLoadResult
	if o.scrape.servers > 0 {
		scrape = b.scrapeLoad(o.scrape, o.epp)
	}
	md := capacityReport(o, results, scrape, time.Since(start))
	fmt.Println(md)
	if o.write != "" {
		if err := markdown.ReplaceStamped(o.write, capacityBegin, capacityEnd, md, stamp); err != nil {
			return err
		}
		for _, p := range o.quote {
			if err := markdown.ReplaceSection(p, capacityHeadlineBegin, headlineEndOf("capacity-headline"), capacityHeadline(results, scrape)+"\n"); err != nil {
				return err
			}
		}
	}
	if o.plot != "" {
		if err := os.WriteFile(o.plot, []byte(capacityPlot(results)), 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.failure != "" {
			return fmt.Errorf("%s × %d: %s", r.title, r.replicas, r.failure)
		}
	}
	if o.scrape.servers > 0 {
		return scrape.check()
	}
	return nil
}

// capacitySessions starts the reference (one replica, when --configs has single)
// and runs every other configuration and replica count in a session beside it.
// The reference's result, first, holds its windows of every session.
func (b *bench) capacitySessions(o capacityOptions, stubs *stubFleet) []capacityResult {
	type subject struct {
		c configuration
		n int
	}
	var subjects []subject
	var refConfig *configuration
	for _, c := range o.configs {
		switch {
		case c.name == "single" && refConfig == nil:
			refConfig = &c
		case c.single:
			subjects = append(subjects, subject{c, 1})
		default:
			for _, n := range o.replicas {
				subjects = append(subjects, subject{c, n})
			}
		}
	}
	var results []capacityResult
	var ref *fleet
	var refRes capacityResult
	if refConfig != nil {
		refRes = capacityResult{config: refConfig.name, title: refConfig.title, replicas: 1}
		f, err := b.startFleet(*refConfig, 1, stubs, echoOptions{})
		if err != nil {
			refRes.failure = err.Error()
			b.logf("%s × 1: %v", refConfig.title, err)
		} else {
			ref = f
			defer ref.stop()
			// The reference's own scrapes, measured alone, are taken off each
			// session's.
			s0, t0 := stubs.total(), time.Now()
			time.Sleep(o.window)
			ref.scrapes = float64(stubs.total()-s0) / time.Since(t0).Seconds()
			refRes.scrapes = ref.scrapes / float64(o.servers)
			if len(subjects) == 0 {
				if err := b.capacitySession(o, stubs, 0, nil, ref, &refRes); err != nil {
					refRes.failure = err.Error()
				}
			}
		}
	}
	for i, s := range subjects {
		res := capacityResult{config: s.c.name, title: s.c.title, replicas: s.n}
		f, err := b.startFleet(s.c, s.n, stubs, echoOptions{clockOffset: o.peerClockOffset, seed: uint64(o.pass)<<32 | uint64(i)})
		if err == nil {
			err = b.capacitySession(o, stubs, i+1, ref, f, &res)
			f.stop()
		}
		if err != nil {
			res.failure = err.Error()
			b.logf("%s × %d: %v", s.c.title, s.n, err)
		}
		refRes.points = append(refRes.points, res.ref...)
		results = append(results, res)
	}
	if refConfig != nil {
		results = append([]capacityResult{refRes}, results...)
	}
	return results
}

// fleet is one configuration's replicas, up for the bench (the reference) or for
// one session.
type fleet struct {
	c       configuration
	procs   []*eppProc
	clients []*extproc.Client
	bodies  []capacityRequest
	next    int
	// scrapes is the fleet's /metrics requests a second, every server together
	// (the reference's, measured alone).
	scrapes float64
	// echo: the emulated peers of a configuration with emulatedPeers.
	echo *echoPeers
	stop func()
}

// startFleet starts configuration c with n replicas, each replica listing the
// others (its emulated peers as echo says, if it has them), and waits until they
// are ready, in sync and warm.
func (b *bench) startFleet(c configuration, n int, stubs *stubFleet, echo echoOptions) (*fleet, error) {
	f := &fleet{c: c}
	var undo []func()
	f.stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		undo = nil
	}
	ctx := context.Background()
	reps := make([]*eppreplica.Replica, n)
	for i := range reps {
		reps[i] = eppreplica.New(i)
	}
	ns, err := b.env.CreateNamespace(ctx, fmt.Sprintf("capacity-%s-%d", c.name, n), nil)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = b.env.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	fail := func(err error) (*fleet, error) {
		f.stop()
		return nil, err
	}
	if _, err := eppreplica.ModelServerPods(ctx, b.env.Clientset, ns, stubs.ips); err != nil {
		return fail(err)
	}
	home, err := os.MkdirTemp("", "routingbench-capacity-")
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = os.RemoveAll(home) })
	scrapes0 := b.scrapes()
	launched := reps
	if c.emulatedPeers {
		// One real replica; the others, echoPeers, up before it looks for them.
		launched = reps[:1]
		peers, err := startEchoPeers(ns, reps[0], reps[1:], sharedIndexPlugin, echo)
		if err != nil {
			return fail(err)
		}
		undo = append(undo, peers.stop)
		f.echo = peers
	}
	procs, err := b.startReplicas(ns, home, launched, c)
	undo = append(undo, func() { stopReplicas(procs) })
	if err != nil {
		return fail(err)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if err := eppreplica.WriteSyncSlices(ctx, b.env.Clientset, ns, reps, all, "routingbench"); err != nil {
		return fail(err)
	}
	if err := b.waitReady(c, procs, n, scrapes0); err != nil {
		return fail(err)
	}
	time.Sleep(2 * time.Second) // the start's work done
	f.procs = procs
	for _, p := range procs {
		f.clients = append(f.clients, p.client)
	}
	return f, nil
}

// window runs one window of the fleet: idle (rate 0) or rate requests a second of
// its next bodies.
func (f *fleet) window(rate float64, w time.Duration, stubs *stubFleet) (capacityPoint, error) {
	if rate == 0 {
		return cpuWindow(f.procs, w, nil)
	}
	count := int(rate * w.Seconds())
	if f.next+count > len(f.bodies) {
		return capacityPoint{}, fmt.Errorf("%.0f req/s: %d requests wanted, %d left of the session's", rate, count, len(f.bodies)-f.next)
	}
	reqs := f.bodies[f.next : f.next+count]
	f.next += count
	p, err := cpuWindow(f.procs, w, func() capacityPoint { return sendOpenLoop(f.clients, stubs, reqs, rate, w) })
	if err != nil {
		return p, err
	}
	p.rate = rate
	if p.answered < p.sent {
		return p, fmt.Errorf("%.0f req/s: %d of %d requests answered", rate, p.answered, p.sent)
	}
	return p, nil
}

// capacitySession runs --rounds rounds of sub beside ref (nil: alone): in each,
// every rate and an idle window in an order shuffled per round, a window on each
// fleet back to back, which goes first alternating. sub's windows go into
// res.points, ref's into res.ref.
func (b *bench) capacitySession(o capacityOptions, stubs *stubFleet, session int, ref, sub *fleet, res *capacityResult) error {
	perRound := 0
	for _, r := range o.rates {
		perRound += int(r * o.window.Seconds())
	}
	n := res.replicas
	var err error
	if sub.bodies, err = capacityBodies(o.rounds*perRound, salt("capacity", sub.c.name, n)); err != nil {
		return err
	}
	sub.next = 0
	if ref != nil {
		if ref.bodies, err = capacityBodies(o.rounds*perRound, salt("capacity reference", sub.c.name, n)); err != nil {
			return err
		}
		ref.next = 0
	}
	levels := append([]float64{0}, o.rates...)
	rng := rand.New(rand.NewPCG(uint64(session), uint64(39+o.pass)))
	scrapes0, began := stubs.total(), time.Now()
	for k0 := range o.rounds {
		k := o.pass*o.rounds + k0
		for j, li := range rng.Perm(len(levels)) {
			rate := levels[li]
			pair := []*fleet{sub, ref}
			if (k+j)%2 == 1 {
				pair[0], pair[1] = ref, sub
			}
			for _, f := range pair {
				if f == nil {
					continue
				}
				if o.pprofDir != "" && rate == o.rates[len(o.rates)-1] && k0 == o.rounds-1 && o.pass == o.passes-1 {
					for i, p := range f.procs {
						go profile(p, o.window, filepath.Join(o.pprofDir, fmt.Sprintf("%s-%d-r%d.pprof", f.c.name, len(f.procs), i)), b.logf)
					}
				}
				p, err := f.window(rate, o.window, stubs)
				if err != nil {
					return fmt.Errorf("%s × %d, round %d: %w", f.c.title, len(f.procs), k+1, err)
				}
				p.pass, p.session, p.round = o.pass, session, k
				if f == sub {
					res.points = append(res.points, p)
				} else {
					res.ref = append(res.ref, p)
				}
			}
		}
		mine, _ := fitPoints(inRound(res.points, k))
		line := fmt.Sprintf("%s × %d, round %d: %.0f µs of CPU per request, every replica together", sub.c.title, n, k+1, 1e6*mine.Mean)
		if ref != nil {
			r1, _ := fitPoints(inRound(res.ref, k))
			line += fmt.Sprintf("; the reference %.0f µs (scaling efficiency %.2f)", 1e6*r1.Mean, r1.Mean/mine.Mean)
		}
		b.logf("%s", line)
	}
	if sub.echo != nil {
		if err := sub.echo.check(sub.procs[0], n); err != nil {
			return err
		}
		pushed, held := sub.echo.loads()
		b.logf("%s × %d: its emulated peers echoed %d placements; they push %d in-flight values and hold %d of the replica's (clock offsets %v)",
			sub.c.title, n, sub.echo.echoed(), pushed, held, sub.echo.offsets)
	}
	other := 0.0 // the reference's scrapes, measured alone (none when sub runs alone)
	if ref != nil {
		other = ref.scrapes
	}
	res.scrapes = (float64(stubs.total()-scrapes0)/time.Since(began).Seconds() - other) / float64(o.servers)
	if sub.c.sharesScraping {
		if err := checkSharedScrapes(res.scrapes, o.refresh); err != nil {
			return err
		}
	}
	slope, _ := res.fit()
	b.logf("%s × %d: idle %.2f%% of a core per replica; %s µs of CPU per request, every replica together; scaling efficiency %s; %.1f scrapes a second per model server",
		sub.c.title, n, 100*res.idle(), slope.scaled(1e6).format(0), res.efficiency().format(2), res.scrapes)
	return nil
}

// inRound is the windows of round k.
func inRound(ps []capacityPoint, k int) []capacityPoint {
	var out []capacityPoint
	for _, p := range ps {
		if p.round == k {
			out = append(out, p)
		}
	}
	return out
}

func (iv interval) scaled(f float64) interval {
	return interval{stats.Interval{Mean: iv.Mean * f, Lo: iv.Lo * f, Hi: iv.Hi * f, N: iv.N}}
}

func sorted(ds []time.Duration) []time.Duration {
	out := slices.Clone(ds)
	slices.Sort(out)
	return out
}

// cpuWindow runs load (nil: nothing) and reads the replicas' CPU over the window it
// took (at least window).
func cpuWindow(procs []*eppProc, window time.Duration, load func() capacityPoint) (capacityPoint, error) {
	before := make([]time.Duration, len(procs))
	for i, p := range procs {
		c, err := cputime.Of(p.process.Pid())
		if err != nil {
			return capacityPoint{}, err
		}
		before[i] = c
	}
	start := time.Now()
	var p capacityPoint
	if load != nil {
		p = load()
	}
	if rest := window - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	p.wall = time.Since(start)
	for i, pr := range procs {
		c, err := cputime.Of(pr.process.Pid())
		if err != nil {
			return capacityPoint{}, err
		}
		cores := float64(c-before[i]) / float64(p.wall)
		p.perCore = append(p.perCore, cores)
		p.cores += cores
	}
	return p, nil
}

// capacityBodies are count requests of the multi-turn workload, conversation by
// conversation in rounds (every conversation's first turn, then every second
// turn...), so that a turn comes after the one before it and the shared index gets
// new blocks and touches as in the routing runs; their text is salted, so no
// session reuses another's prefixes.
func capacityBodies(count int, textSalt uint64) ([]capacityRequest, error) {
	spec, err := preset(workload.MultiTurn, sizeFits, 1)
	if err != nil {
		return nil, err
	}
	spec.Count = count/spec.Turns + 1
	convs, err := workload.Generate(spec, 1, textSalt)
	if err != nil {
		return nil, err
	}
	const round = 64 // conversations interleaved
	var out []capacityRequest
	for start := 0; start < len(convs); start += round {
		group := convs[start:min(start+round, len(convs))]
		answers := make([][]string, len(group))
		for i, c := range group {
			answers[i] = c.Answers()
		}
		for k := range spec.Turns {
			for i, c := range group {
				req := c.Request(k, answers[i])
				req.Model = modelsim.DefaultConfig().Model
				body, err := json.Marshal(req)
				if err != nil {
					return nil, err
				}
				out = append(out, capacityRequest{path: c.Path(), body: body})
			}
		}
	}
	return out, nil
}

type capacityRequest struct {
	path string
	body []byte
}

var capacityIDs atomic.Int64

// sendOpenLoop sends reqs at rate (a second, evenly spaced; open loop: a request
// is sent at its time whatever the others do), each through the replicas in turn,
// to the server the EPP picked and back, and returns what was answered and the
// picking times. It waits for the requests sent, at most the window again.
func sendOpenLoop(clients []*extproc.Client, stubs *stubFleet, reqs []capacityRequest, rate float64, window time.Duration) capacityPoint {
	ctx, cancel := context.WithTimeout(context.Background(), 2*window+10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var p capacityPoint
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i, r := range reqs {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		p.sent++
		wg.Go(func() {
			c := clients[i%len(clients)]
			t0 := time.Now()
			call := extproc.Call{Path: r.path, Body: r.body, ID: fmt.Sprintf("capacity-%d", capacityIDs.Add(1))}
			req, err := c.Route(ctx, call)
			if err != nil {
				return
			}
			picked := time.Since(t0)
			status, body, err := stubs.post(ctx, req.Endpoint, r.path, req.Body)
			if err != nil {
				req.Abort()
				return
			}
			if err := req.Respond(ctx, status, "application/json", body); err != nil || status != http.StatusOK {
				return
			}
			mu.Lock()
			p.answered++
			p.route = append(p.route, picked)
			mu.Unlock()
		})
	}
	wg.Wait()
	return p
}

// profile writes a CPU profile of p over d (its /debug/pprof/profile).
func profile(p *eppProc, d time.Duration, path string, logf func(string, ...any)) {
	client := &http.Client{Timeout: d + 10*time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.Metrics, int(d.Seconds())))
	if err != nil {
		logf("profile of %s: %v", p.Pod, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		logf("profile of %s: %v (%s)", p.Pod, err, resp.Status)
	}
}

// stubFleet is model servers that answer at once: the API and metrics of modelsim
// (vLLM's names, the same cache configuration), no queue, no cost; each counts
// the scrapes of its /metrics.
type stubFleet struct {
	ips     []string
	byAddr  map[string]int
	servers []*http.Server
	count   []*atomic.Int64
	client  *http.Client
}

// refreshOf is the EPPs' --refresh-metrics-interval, in the report.
func refreshOf(d time.Duration) string {
	if d <= 0 {
		return "50ms (upstream's default)"
	}
	return d.String()
}

// pageName says what a metrics page holds, in the report.
var pageName = map[modelsim.MetricsPage]string{
	modelsim.VLLMPage: "the families and histogram buckets of a vLLM v1 server",
	"":                "the families and histogram buckets of a vLLM v1 server", // the zero value is VLLMPage
	modelsim.CorePage: "the families llm-d-router reads, under vLLM's names",
}

// stubConfig is the configuration whose metrics the stub servers serve: the
// routing runs' servers'.
func stubConfig(page modelsim.MetricsPage) modelsim.Config {
	cfg := modelsim.DefaultConfig()
	cfg.CapacityBlocks = benchCapacity
	cfg.Page = page
	return cfg
}

func startStubs(n int, page modelsim.MetricsPage) (*stubFleet, error) {
	f := &stubFleet{byAddr: map[string]int{}, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}}
	metrics := modelsim.IdleMetrics(stubConfig(page))
	for i := range n {
		ip := netns.Addr(100 + i)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(eppreplica.ModelServerPort)))
		if err != nil {
			f.close()
			return nil, fmt.Errorf("model server %d: %w", i, err)
		}
		scrapes := &atomic.Int64{}
		mux := http.NewServeMux()
		answer := func(chat bool) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, modelsim.MaxBodyBytes))
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				req, err := modelsim.ParseRequest(body, chat)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				prompt := req.Render()
				_, text := modelsim.Continuation(prompt, req.OutputTokens(), chat)
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(modelsim.Immediate(req, modelsim.TokenCount(prompt), string(text)))
			}
		}
		mux.HandleFunc("POST /v1/completions", answer(false))
		mux.HandleFunc("POST /v1/chat/completions", answer(true))
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			scrapes.Add(1)
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write(metrics)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		f.ips = append(f.ips, ip)
		f.byAddr[l.Addr().String()] = i
		f.servers = append(f.servers, srv)
		f.count = append(f.count, scrapes)
	}
	return f, nil
}

func (f *stubFleet) close() {
	for _, s := range f.servers {
		_ = s.Close()
	}
}

func (f *stubFleet) scrapes() []int64 {
	out := make([]int64, len(f.count))
	for i, c := range f.count {
		out[i] = c.Load()
	}
	return out
}

func (f *stubFleet) total() int64 {
	var t int64
	for _, c := range f.count {
		t += c.Load()
	}
	return t
}

func (f *stubFleet) post(ctx context.Context, endpoint, path string, body []byte) (int, []byte, error) {
	if _, ok := f.byAddr[endpoint]; !ok {
		return 0, nil, fmt.Errorf("the EPP picked %s, no model server of the run", endpoint)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+endpoint+path, strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, modelsim.MaxBodyBytes))
	return resp.StatusCode, b, err
}
