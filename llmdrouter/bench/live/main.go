// Command benchlive measures epp side by side with a reference on one real API
// server (envtest), the two taking turns so that they never share the CPU: `make
// bench-live` runs it and writes its table to docs/PERFORMANCE.md.
//
// The reference (bench/live/reference) is peer discovery written the plain way:
// a client-go informer that recomputes the whole set on every event and encodes
// /debug/peers on every request. For each size (peers in slices of 100) and run,
// each implementation is started, then measured:
//
//   - start-up: from launching the process to /readyz 200;
//   - latency: one slice update adds (or removes) one endpoint; a common poller reads
//     /debug/peers every 2 ms and stops at the first response that shows the change;
//     latency is from sending the write to receiving that response;
//   - GET: the time of one GET /debug/peers, sequential requests;
//   - CPU per event: the process's CPU time over a burst of writes with nobody
//     polling, minus its idle CPU over the same wall time, divided by the writes;
//   - reads per event: the API server's own count of LIST and GET requests on
//     EndpointSlices over the burst, minus the idle rate, divided by the writes;
//
// and once per run at 100 peers: RSS before and after 5,000 slices of other
// Services are created in the namespace.
//
// With --llmd=<binary> (llmdrouter/cmd/epp, `make build-llmd`), llm-d-router's EPP
// with the endpointslice-peer-discovery plugin takes its turn as a third
// implementation, measured through the plugin's /debug/peers (its debugAddress),
// which shows the set the plugin delivers to the EPP's peer store; the report then
// compares it with epp, the same discovery in a process of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

const (
	implEpp       = "epp"
	implReference = "reference"
	implLLMD      = "llmd"
	pollEvery     = 2 * time.Millisecond
	// burstEvery spaces the writes whose CPU cost is measured.
	burstEvery = 10 * time.Millisecond
	// eventTimeout bounds the wait for one change; the bench fails past it.
	eventTimeout = 10 * time.Second
)

type options struct {
	sizes     []int
	runs      int
	events    int
	cpuEvents int
	gets      int
	unrelated int
	idle      time.Duration
	eppBin    string
	eppFlags  []string
	refBin    string
	llmdBin   string
	write     string
	smoke     bool
}

type bench struct {
	options
	env *testenv.Env
}

func main() {
	var o options
	sizes := flag.String("sizes", "3,100,1000,10000", "Peer counts to measure, comma-separated.")
	flag.IntVar(&o.runs, "runs", 5, "Runs per size; the table shows the median of the runs.")
	flag.IntVar(&o.events, "events", 200, "Changes per run whose latency is measured.")
	flag.IntVar(&o.cpuEvents, "cpu-events", 400, "Changes per run whose CPU cost is measured (nobody polling).")
	flag.IntVar(&o.gets, "gets", 50, "GET /debug/peers requests timed per run.")
	flag.IntVar(&o.unrelated, "unrelated", 5000, "Slices of other Services created for the RSS figure.")
	flag.DurationVar(&o.idle, "idle", 4*time.Second, "Idle window for the CPU and request baselines.")
	flag.StringVar(&o.eppBin, "epp", "bin/epp", "Path of the epp binary.")
	eppFlags := flag.String("epp-flags", "", "Extra flags for epp, space-separated (e.g. --zap-log-level=error).")
	flag.StringVar(&o.refBin, "reference", "bin/benchlive-reference", "Path of the reference binary.")
	flag.StringVar(&o.llmdBin, "llmd", "", "Path of llm-d-router's EPP with peer discovery (bin/epp-llmd); empty leaves it out.")
	flag.StringVar(&o.write, "write", "", "Markdown file whose bench-live section is replaced by the table.")
	flag.BoolVar(&o.smoke, "smoke", false, "A short run that checks the bench works and epp's basics: 3 and 100 peers, one run, few events.")
	flag.Parse()
	o.eppFlags = strings.Fields(*eppFlags)
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "benchlive: --sizes: %q is not a positive number\n", s)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
	}
	o.eppFlags = strings.Fields(*eppFlags)
	if o.smoke {
		o.sizes, o.runs, o.events, o.cpuEvents, o.gets, o.unrelated, o.idle = []int{3, 100}, 1, 20, 40, 10, 200, time.Second
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchlive:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	bins := []string{o.eppBin, o.refBin}
	if o.llmdBin != "" {
		bins = append(bins, o.llmdBin)
	}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s: %w (make bench-live builds it)", b, err)
		}
	}
	stamp, err := markdown.StampOf(bins...)
	if err != nil {
		return err
	}
	env, err := testenv.Start(testenv.WithoutFsync())
	if err != nil {
		return err
	}
	defer env.Stop()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{options: o, env: env}
	began := time.Now()
	res := newResults()
	for _, n := range o.sizes {
		svc, err := b.createService(ctx, fmt.Sprintf("bench-%d", n), n)
		if err != nil {
			return fmt.Errorf("creating %d endpoints: %w", n, err)
		}
		for r := range o.runs {
			for _, impl := range b.order(r) {
				m, err := b.measure(ctx, impl, svc, n)
				if err != nil {
					return fmt.Errorf("%s, %d peers, run %d: %w", impl, n, r+1, err)
				}
				res.add(impl, n, m)
				fmt.Fprintf(os.Stderr, "%-9s %5d peers run %d: %s\n", impl, n, r+1, m)
			}
		}
	}
	svc, err := b.createService(ctx, "bench-rss", 100)
	if err != nil {
		return err
	}
	for r := range o.runs {
		for _, impl := range b.order(r) {
			d, err := b.rssDelta(ctx, impl, svc.ns)
			if err != nil {
				return fmt.Errorf("%s, RSS run %d: %w", impl, r+1, err)
			}
			res.rss[impl] = append(res.rss[impl], d)
			fmt.Fprintf(os.Stderr, "%-9s RSS run %d: %+.2f MiB with %d unrelated slices\n", impl, r+1, d, o.unrelated)
		}
	}
	table := res.markdown(o, time.Since(began))
	fmt.Print(table)
	if o.smoke {
		return res.smokeCheck(o)
	}
	if o.write != "" {
		return markdown.ReplaceStamped(o.write, sectionBegin, sectionEnd, table, stamp)
	}
	return nil
}

// order rotates which implementation goes first.
func (b *bench) order(run int) []string {
	impls := []string{implEpp, implReference}
	if b.llmdBin != "" {
		impls = append(impls, implLLMD)
	}
	k := run % len(impls)
	return append(impls[k:len(impls):len(impls)], impls[:k]...)
}

// measurement is one run of one implementation at one size.
type measurement struct {
	startup      time.Duration
	latency      []time.Duration
	delivery     []time.Duration // write -> the event at a bare watch in the bench
	share        []time.Duration // the event at the bare watch -> /debug/peers shows it
	gets         []time.Duration
	cpuPerEvent  time.Duration
	readsPerEvnt float64
}

func (m measurement) String() string {
	return fmt.Sprintf("start-up %v, latency p50 %v p99 %v (API server p50 %v, own share p50 %v p99 %v), GET p50 %v, CPU/event %v, reads/event %.3f",
		m.startup.Round(time.Millisecond), round(stats.Percentile(m.latency, 0.5)), round(stats.Percentile(m.latency, 0.99)),
		round(stats.Percentile(m.delivery, 0.5)), round(stats.Percentile(m.share, 0.5)), round(stats.Percentile(m.share, 0.99)),
		round(stats.Percentile(m.gets, 0.5)), round(m.cpuPerEvent), m.readsPerEvnt)
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func (b *bench) measure(ctx context.Context, impl string, svc *service, n int) (measurement, error) {
	var m measurement
	p, err := b.start(impl, svc.ns)
	if err != nil {
		return m, err
	}
	defer p.stop()
	m.startup = time.Since(p.started)
	body, err := p.peers()
	if err != nil {
		return m, err
	}
	if got := strings.Count(string(body), `"peer-`); got != n {
		return m, fmt.Errorf("ready with %d peers, want %d", got, n)
	}

	// Latency: write, then poll until the change shows.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	bare, err := b.watchDeliveries(watchCtx, svc.ns)
	if err != nil {
		return m, err
	}
	for i := range b.events {
		t0 := time.Now()
		c, err := svc.step(ctx, b)
		if err != nil {
			return m, err
		}
		seen, err := p.waitFor(c.marker, c.present, eventTimeout)
		if err != nil {
			return m, fmt.Errorf("change %d (%s present=%v): %w", i, c.marker, c.present, err)
		}
		m.latency = append(m.latency, seen.Sub(t0))
		arrived, err := bare.arrival(c.rv)
		if err != nil {
			return m, err
		}
		m.delivery = append(m.delivery, arrived.Sub(t0))
		m.share = append(m.share, seen.Sub(arrived))
	}
	stopWatch()
	if err := svc.settle(ctx, b, p); err != nil {
		return m, err
	}

	// GET: sequential requests.
	for range b.gets {
		t0 := time.Now()
		if _, err := p.peers(); err != nil {
			return m, err
		}
		m.gets = append(m.gets, time.Since(t0))
	}

	// CPU and reads: an idle baseline, then a burst of writes nobody polls.
	idleCPU, idleReads, idleWall, err := b.window(ctx, p, svc, func() error { time.Sleep(b.idle); return nil })
	if err != nil {
		return m, err
	}
	burst := func() error {
		for range b.cpuEvents {
			next := time.Now().Add(burstEvery)
			if _, err := svc.step(ctx, b); err != nil {
				return err
			}
			time.Sleep(time.Until(next))
		}
		return nil
	}
	cpu, reads, wall, err := b.window(ctx, p, svc, burst)
	if err != nil {
		return m, err
	}
	rate := func(busy, idle, wall, idleWall float64) float64 { return busy - idle*wall/idleWall }
	events := float64(b.cpuEvents)
	m.cpuPerEvent = time.Duration(rate(float64(cpu), float64(idleCPU), float64(wall), float64(idleWall)) / events)
	m.readsPerEvnt = rate(reads, idleReads, float64(wall), float64(idleWall)) / events
	if err := svc.settle(ctx, b, p); err != nil {
		return m, err
	}
	return m, nil
}

// window runs f and returns the CPU the process used and the API reads counted
// from before f to the moment the process has seen every write f made.
func (b *bench) window(ctx context.Context, p *proc, svc *service, f func() error) (time.Duration, float64, time.Duration, error) {
	c0, err := p.cpu()
	if err != nil {
		return 0, 0, 0, err
	}
	r0, err := b.readRequests(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	if err := f(); err != nil {
		return 0, 0, 0, err
	}
	c1, r1, t1, err := b.processed(ctx, p, svc)
	if err != nil {
		return 0, 0, 0, err
	}
	return c1 - c0, r1 - r0, t1.Sub(t0), nil
}

// processed waits until the process has handled every write so far (its
// /debug/peers shows the newest change) and returns its CPU time, the API read
// count and the time, all taken before the GET that confirmed it: a GET is not an
// event, and at most a few unconfirmed GETs are counted.
func (b *bench) processed(ctx context.Context, p *proc, svc *service) (time.Duration, float64, time.Time, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		c, err := p.cpu()
		if err != nil {
			return 0, 0, time.Time{}, err
		}
		r, err := b.readRequests(ctx)
		if err != nil {
			return 0, 0, time.Time{}, err
		}
		t := time.Now()
		body, err := p.peers()
		if err != nil {
			return 0, 0, time.Time{}, err
		}
		if svc.last.marker == nil || strings.Contains(string(body), string(svc.last.marker)) == svc.last.present {
			return c, r, t, nil
		}
		if time.Now().After(deadline) {
			return 0, 0, time.Time{}, fmt.Errorf("%s (present=%v) not seen within 60s of the last write", svc.last.marker, svc.last.present)
		}
	}
}

// rssDelta starts impl in ns and returns how much its RSS grew, in MiB, when
// b.unrelated slices of other Services were created in ns.
func (b *bench) rssDelta(ctx context.Context, impl, ns string) (float64, error) {
	p, err := b.start(impl, ns)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	defer func() { _ = b.deleteUnrelated(context.WithoutCancel(ctx), ns) }()
	time.Sleep(2 * time.Second)
	before, err := p.rss()
	if err != nil {
		return 0, err
	}
	if err := b.createUnrelated(ctx, ns, b.unrelated); err != nil {
		return 0, fmt.Errorf("creating %d unrelated slices: %w", b.unrelated, err)
	}
	time.Sleep(3 * time.Second)
	after, err := p.rss()
	if err != nil {
		return 0, err
	}
	body, err := p.peers()
	if err != nil {
		return 0, err
	}
	if strings.Contains(string(body), `"other-`) {
		return 0, fmt.Errorf("%s lists endpoints of other Services", impl)
	}
	return float64(after-before) / (1 << 20), nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
