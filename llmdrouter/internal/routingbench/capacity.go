package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/cputime"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/markdown"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/routingbench/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/routingbench/workload"
)

// The capacity mode (routingbench capacity, make bench-capacity): what one more
// request costs the EPP replicas, all of them together, at 1, 3 and 8 replicas.
// The model servers answer at once (stubServer: the same API and metrics as
// modelsim, no cost), so that the machine's CPU goes to the EPPs; open-loop load
// comes at several rates, each for a window, between two idle windows as long; the
// replicas' CPU is read from /proc/<pid>/stat (utime and stime, threads that
// exited included). The marginal cost per request is the slope of the replicas'
// CPU (cores) against the rate (requests a second), fitted over every window, idle
// ones at rate 0, with its 95% interval.

type capacityOptions struct {
	epp      string
	configs  []configuration
	replicas []int
	rates    []float64
	window   time.Duration
	servers  int
	write    string
	quote    []string
	plot     string
	pprofDir string
}

func parseCapacityOptions(args []string) (capacityOptions, error) {
	fs := flag.NewFlagSet("capacity", flag.ExitOnError)
	var o capacityOptions
	fs.StringVar(&o.epp, "epp", "", "the EPP build (bin/epp-llmd)")
	configs := fs.String("configs", "single,local,peer,shared-index", "configurations (of run's): single runs 1 replica, the others --replicas")
	replicas := fs.String("replicas", "3,8", "replica counts of the active-active configurations")
	rates := fs.String("rates", "40,80,120,160", "open-loop request rates, in requests a second over every replica together (at least 3)")
	fs.DurationVar(&o.window, "window", 8*time.Second, "each rate's window, and each idle window (one before the rates, one after)")
	fs.IntVar(&o.servers, "servers", 8, "model servers (stubs that answer at once)")
	fs.StringVar(&o.write, "write", "", "write the table into this markdown file, between the capacity-bench markers")
	quote := fs.String("quote", "", "with --write, write the capacity headline also into these markdown files (comma-separated), between the capacity-headline markers")
	fs.StringVar(&o.plot, "plot", "", "write the plot (SVG) of requests per core against replicas to this file")
	fs.StringVar(&o.pprofDir, "pprof-dir", "", "write a CPU profile of the first replica at the highest rate of each configuration here (the EPP's /debug/pprof/profile)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, name := range splitList(*configs) {
		c, err := configurationNamed(name)
		if err != nil {
			return o, fmt.Errorf("--configs: %w", err)
		}
		o.configs = append(o.configs, c)
	}
	for _, f := range splitList(*replicas) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 || n > 50 {
			return o, fmt.Errorf("--replicas=%q: want counts from 2 to 50, comma-separated", *replicas)
		}
		o.replicas = append(o.replicas, n)
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
	case len(o.rates) < 3:
		return o, fmt.Errorf("--rates=%q: want at least 3 rates (a slope needs them)", *rates)
	case o.window < time.Second:
		return o, fmt.Errorf("--window=%v: want at least 1s", o.window)
	case o.servers < 1 || o.servers > 100:
		return o, fmt.Errorf("--servers=%d: want 1 to 100", o.servers)
	}
	if _, err := os.Stat(o.epp); err != nil {
		return o, fmt.Errorf("--epp=%s: %w", o.epp, err)
	}
	return o, nil
}

// capacityPoint is one window: the rate sent (0: idle), the replicas' CPU over it
// (cores, every replica together), what was answered, and the EPP's picking times.
type capacityPoint struct {
	rate     float64
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
	// scrapes is the model servers' /metrics requests per server and second, over
	// every window.
	scrapes float64
	failure string
}

// fit is the least-squares line of cores against rate over every window: its
// slope (core-seconds per request: the marginal cost) with its 95% interval, and
// its intercept (cores with no request).
func (r capacityResult) fit() (slope interval, intercept float64) {
	n := len(r.points)
	if n < 3 {
		return interval{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}, math.NaN()
	}
	var sx, sy float64
	for _, p := range r.points {
		sx += p.rate
		sy += p.cores
	}
	mx, my := sx/float64(n), sy/float64(n)
	var sxx, sxy float64
	for _, p := range r.points {
		sxx += (p.rate - mx) * (p.rate - mx)
		sxy += (p.rate - mx) * (p.cores - my)
	}
	b := sxy / sxx
	a := my - b*mx
	var sse float64
	for _, p := range r.points {
		e := p.cores - (a + b*p.rate)
		sse += e * e
	}
	half := tQuantile(n-2) * math.Sqrt(sse/float64(n-2)/sxx)
	return interval{mean: b, lo: b - half, hi: b + half, n: n}, a
}

// idle is the mean of the idle windows' cores, per replica.
func (r capacityResult) idle() float64 {
	var sum float64
	k := 0
	for _, p := range r.points {
		if p.rate == 0 {
			sum += p.cores
			k++
		}
	}
	if k == 0 {
		return math.NaN()
	}
	return sum / float64(k) / float64(r.replicas)
}

// top is the window of the highest rate.
func (r capacityResult) top() capacityPoint {
	var best capacityPoint
	for _, p := range r.points {
		if p.rate >= best.rate {
			best = p
		}
	}
	return best
}

func capacityMain(args []string) error {
	o, err := parseCapacityOptions(args)
	if err != nil {
		return err
	}
	netns.Isolate("routingbench capacity")
	env, err := testenv.Start(testenv.WithoutFsync())
	if err != nil {
		return err
	}
	defer env.Stop()
	stubs, err := startStubs(o.servers)
	if err != nil {
		return err
	}
	defer stubs.close()
	b := &bench{o: runOptions{epp: o.epp, servers: o.servers}, env: env, servers: stubs.byAddr, scrapeCounts: stubs.scrapes,
		logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "routingbench capacity: "+f+"\n", a...) }}
	start := time.Now()
	var results []capacityResult
	for _, c := range o.configs {
		counts := o.replicas
		if c.single {
			counts = []int{1}
		}
		for _, n := range counts {
			r, err := b.capacityRun(c, n, o, stubs)
			if err != nil {
				r.failure = err.Error()
				b.logf("%s × %d: %v", c.title, n, err)
			}
			results = append(results, r)
		}
	}
	md := capacityReport(o, results, time.Since(start))
	fmt.Println(md)
	if o.write != "" {
		if err := markdown.ReplaceSection(o.write, capacityBegin, capacityEnd, md); err != nil {
			return err
		}
		for _, p := range o.quote {
			if err := markdown.ReplaceSection(p, capacityHeadlineBegin, headlineEndOf("capacity-headline"), capacityHeadline(results)+"\n"); err != nil {
				return err
			}
		}
	}
	if o.plot != "" {
		if err := os.WriteFile(o.plot, []byte(capacityPlot(o, results)), 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.failure != "" {
			return fmt.Errorf("%s × %d: %s", r.title, r.replicas, r.failure)
		}
	}
	return nil
}

// capacityRun measures configuration c with n replicas.
func (b *bench) capacityRun(c configuration, n int, o capacityOptions, stubs *stubFleet) (capacityResult, error) {
	res := capacityResult{config: c.name, title: c.title, replicas: n}
	ctx := context.Background()
	reps := make([]*eppreplica.Replica, n)
	for i := range reps {
		reps[i] = eppreplica.New(i)
	}
	ns, err := b.env.CreateNamespace(ctx, "capacity-"+c.name, nil)
	if err != nil {
		return res, err
	}
	defer func() { _ = b.env.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()
	if _, err := eppreplica.ModelServerPods(ctx, b.env.Clientset, ns, stubs.ips); err != nil {
		return res, err
	}
	home, err := os.MkdirTemp("", "routingbench-capacity-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(home) }()
	scrapes0 := b.scrapes()
	procs, err := b.startReplicas(ns, home, reps, c.config)
	defer stopReplicas(procs)
	if err != nil {
		return res, err
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if err := eppreplica.WriteSyncSlices(ctx, b.env.Clientset, ns, reps, all, "routingbench"); err != nil {
		return res, err
	}
	if err := b.waitReady(c, procs, scrapes0); err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second) // the start's work done
	bodies, err := capacityBodies(o, c.name, n)
	if err != nil {
		return res, err
	}
	clients := make([]*extproc.Client, n)
	for i, p := range procs {
		clients[i] = p.client
	}
	scrapeStart, began := stubs.total(), time.Now()
	idle := func() error {
		p, err := cpuWindow(procs, o.window, nil)
		if err != nil {
			return err
		}
		res.points = append(res.points, p)
		return nil
	}
	if err := idle(); err != nil {
		return res, err
	}
	next := 0
	for i, rate := range o.rates {
		count := int(rate * o.window.Seconds())
		if next+count > len(bodies) {
			next = 0
		}
		load := func() capacityPoint { return sendOpenLoop(clients, stubs, bodies[next:next+count], rate, o.window) }
		if o.pprofDir != "" && i == len(o.rates)-1 {
			go profile(procs[0], o.window, filepath.Join(o.pprofDir, fmt.Sprintf("%s-%d.pprof", c.name, n)), b.logf)
		}
		p, err := cpuWindow(procs, o.window, load)
		if err != nil {
			return res, err
		}
		p.rate = rate
		next += count
		res.points = append(res.points, p)
		b.logf("%s × %d: %.0f req/s: %d of %d answered, %.1f%% of a core in all, picking p99 %v",
			c.title, n, rate, p.answered, p.sent, 100*p.cores, percentile(sorted(p.route), 0.99).Round(100*time.Microsecond))
		if p.answered < p.sent {
			return res, fmt.Errorf("%.0f req/s: %d of %d requests answered", rate, p.answered, p.sent)
		}
	}
	if err := idle(); err != nil {
		return res, err
	}
	res.scrapes = float64(stubs.total()-scrapeStart) / time.Since(began).Seconds() / float64(o.servers)
	slope, _ := res.fit()
	b.logf("%s × %d: idle %.2f%% of a core per replica; %s µs of CPU per request, every replica together; %.1f scrapes a second per model server",
		c.title, n, 100*res.idle(), slope.scaled(1e6).format(0), res.scrapes)
	return res, nil
}

func (iv interval) scaled(f float64) interval {
	return interval{mean: iv.mean * f, lo: iv.lo * f, hi: iv.hi * f, n: iv.n}
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

// capacityBodies are the requests of the capacity runs: the multi-turn workload's
// turns, conversation by conversation in rounds (every conversation's first turn,
// then every second turn...), so that a turn comes after the one before it and the
// shared index gets new blocks and touches as in the routing runs; their text is
// the configuration's own, so no run reuses another's prefixes.
func capacityBodies(o capacityOptions, config string, n int) ([]capacityRequest, error) {
	spec, err := preset(workload.MultiTurn, sizeFits, 1)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, r := range o.rates {
		total += int(r * o.window.Seconds())
	}
	spec.Count = total/spec.Turns + 1
	convs, err := workload.Generate(spec, 1, salt("capacity", config, n))
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

func startStubs(n int) (*stubFleet, error) {
	f := &stubFleet{byAddr: map[string]int{}, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}}
	cfg := modelsim.DefaultConfig()
	cfg.CapacityBlocks = benchCapacity // the routing runs' servers' metrics
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
			modelsim.WriteIdleMetrics(w, cfg)
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

// The capacity section's markers, and those of the headline the README quotes.
const (
	capacityBegin         = "<!-- capacity-bench:begin (generated by `make bench-capacity`, do not edit) -->"
	capacityEnd           = "<!-- capacity-bench:end -->"
	capacityHeadlineBegin = "<!-- capacity-headline:begin (generated by `make bench-capacity` into docs/PERFORMANCE.md and README.md; make lint checks that they agree) -->"
)

func headlineEndOf(name string) string { return "<!-- " + name + ":end -->" }

// Issue 39's target: with the shared index, the cluster-wide marginal CPU per
// request at 8 replicas at most 1.1 × one replica's.
const targetMarginal = 1.1

// capacityReport is the section: the table, per configuration and replica count.
func capacityReport(o capacityOptions, results []capacityResult, took time.Duration) string {
	var sb strings.Builder
	var rates []string
	for _, r := range o.rates {
		rates = append(rates, fmt.Sprintf("%g", r))
	}
	fmt.Fprintf(&sb, "Measured %s on %d cores (%s, %s/%s) by `make bench-capacity` in %v: the real EPP build (`bin/epp-llmd`) on a real API server, %d model servers that answer at once (the API and metrics of `modelsim`, no queue and no cost: the machine's CPU goes to the EPPs), the multi-turn workload's requests (each configuration's own text) sent open-loop at %s requests a second in all, spread over the replicas in turn, each for %v, between an idle window as long before and one after. CPU: every replica's utime and stime (`/proc/<pid>/stat`, threads that exited included) over each window. The marginal cost is the slope of the replicas' CPU (every replica together) against the rate, fitted over every window (the idle ones at rate 0), with its 95%% interval: what one more request routed anywhere costs the fleet. Requests per core: its inverse. Scaling efficiency: one replica's marginal cost over the fleet's (1.0: more replicas cost nothing more per request; the target with the shared index at 8 replicas is at least %.2f). Picking p99: the time the EPP took to pick a server (the ext_proc exchange until its answer) at the highest rate. Idle: per replica, what the replicas use with no request: the model servers' metrics scraped, discovery, and with peer-syncer its pushes and heartbeats, with the shared index its broadcast. Scrapes: the `/metrics` requests each model server gets a second (every replica scrapes every server).\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, took.Round(time.Second),
		o.servers, strings.Join(rates, ", "), o.window, 1/targetMarginal)
	sb.WriteString("| configuration | replicas | marginal CPU per request, every replica | requests per core | scaling efficiency | picking p99 at the highest rate | idle CPU per replica | scrapes per server and second | answered |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	one := findCapacity(results, "single", 1)
	for _, r := range results {
		if r.failure != "" {
			fmt.Fprintf(&sb, "| %s | %d | not measured: %s | | | | | | |\n", r.title, r.replicas, firstLine(r.failure))
			continue
		}
		slope, _ := r.fit()
		us := slope.scaled(1e6)
		perCore := fmt.Sprintf("%.0f [%.0f, %.0f]", 1/slope.mean, 1/slope.hi, 1/slope.lo)
		eff := "–"
		if one != nil && one.failure == "" {
			s1, _ := one.fit()
			e := interval{mean: s1.mean / slope.mean, lo: s1.mean / slope.hi, hi: s1.mean / slope.lo, n: slope.n}
			eff = e.format(2)
			if r.config == "shared-index" && r.replicas == 8 {
				eff += ": " + e.shown(1/targetMarginal)
			}
		}
		top := r.top()
		answered, sent := 0, 0
		for _, p := range r.points {
			answered += p.answered
			sent += p.sent
		}
		fmt.Fprintf(&sb, "| %s | %d | %s µs | %s | %s | %s | %.1f%% of a core | %.1f | %d of %d |\n", r.title, r.replicas, us.format(0), perCore, eff,
			millis(float64(percentile(sorted(top.route), 0.99))), 100*r.idle(), r.scrapes, answered, sent)
	}
	fmt.Fprintf(&sb, "\n<!-- capacity-headline:begin (generated by `make bench-capacity` into docs/PERFORMANCE.md and README.md; make lint checks that they agree) -->\n%s\n%s\n",
		capacityHeadline(results), headlineEndOf("capacity-headline"))
	sb.WriteString("\n![Requests per core of EPP against the number of replicas, per configuration](capacity-bench.svg)\n")
	return sb.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

func findCapacity(results []capacityResult, config string, n int) *capacityResult {
	for i := range results {
		if results[i].config == config && results[i].replicas == n {
			return &results[i]
		}
	}
	return nil
}

// capacityHeadline is what active-active buys in capacity, as the README says it.
func capacityHeadline(results []capacityResult) string {
	one := findCapacity(results, "single", 1)
	if one == nil || one.failure != "" {
		return "Capacity: not measured."
	}
	s1, _ := one.fit()
	var parts []string
	for _, r := range results {
		if r.config != "shared-index" || r.failure != "" {
			continue
		}
		s, _ := r.fit()
		parts = append(parts, fmt.Sprintf("%d replicas sharing the index give %.1f× one replica's capacity (a scaling efficiency of %.2f [%.2f, %.2f])",
			r.replicas, float64(r.replicas)*s1.mean/s.mean, s1.mean/s.mean, s1.mean/s.hi, s1.mean/s.lo))
	}
	if len(parts) == 0 {
		return "Capacity: not measured."
	}
	return fmt.Sprintf("Capacity: one replica routes %.0f requests a second per core of EPP; %s: each replica costs the fleet its own requests plus what it merges and pushes of the others'.",
		1/s1.mean, strings.Join(parts, "; "))
}

// capacityPlot is requests per core of EPP (the fleet's, at the marginal cost)
// against the number of replicas, per configuration.
func capacityPlot(o capacityOptions, results []capacityResult) string {
	const w, h, left, bottom, top, right = 560.0, 320.0, 60.0, 40.0, 20.0, 180.0
	counts := append([]int{1}, o.replicas...)
	maxV := 0.0
	for _, r := range results {
		if s, _ := r.fit(); r.failure == "" && s.mean > 0 {
			maxV = max(maxV, 1/s.mean)
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	x := func(n int) float64 {
		i := slices.Index(counts, n)
		return left + float64(i)*(w-left-right)/float64(max(1, len(counts)-1))
	}
	y := func(v float64) float64 { return h - bottom - v/(1.1*maxV)*(h-bottom-top) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&sb, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&sb, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top, left, h-bottom)
	for _, n := range counts {
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="middle">%d</text>`+"\n", x(n), h-bottom+15, n)
	}
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="middle">replicas</text>`+"\n", (left+w-right)/2, h-5)
	for k := 0; k <= 4; k++ {
		v := 1.1 * maxV * float64(k) / 4
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", left-5, y(v)+4, v)
	}
	fmt.Fprintf(&sb, `<text x="12" y="%.0f" transform="rotate(-90 12 %.0f)" text-anchor="middle">requests per core of EPP</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2)
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"}
	one := findCapacity(results, "single", 1)
	for ci, c := range o.configs {
		if c.single {
			continue
		}
		var pts []string
		if one != nil && one.failure == "" {
			if s, _ := one.fit(); s.mean > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(1), y(1/s.mean)))
			}
		}
		for _, n := range o.replicas {
			if r := findCapacity(results, c.name, n); r != nil && r.failure == "" {
				if s, _ := r.fit(); s.mean > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(n), y(1/s.mean)))
				}
			}
		}
		color := colors[ci%len(colors)]
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", w-right+10, top+15*float64(ci+1), color, c.title)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}
