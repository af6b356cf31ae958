package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/loadgen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
)

// The rolling restart run: the multi-turn workload that fits, long enough for a
// steady state before, during and after the replicas are replaced one at a time
// (times simulated, from the run's start).
const (
	// restartArrivals: sessions arrive over this long, at the workload's rate.
	restartArrivals = 120 * time.Second
	// restartWarmup: the figures count from here on, once the first sessions'
	// later turns (which reuse the earlier ones) have come.
	restartWarmup = 20 * time.Second
	// restartAt: the first replica is replaced then.
	restartAt = 40 * time.Second
)

// readinessPeriod is the kubelet's readiness probe period for the EPP: the
// readinessProbe.periodSeconds of upstream's chart (routerlib) and of this
// project's (no initial delay).
const readinessPeriod = 2 * time.Second

// Bounds of a replacement's steps, in wall time.
const (
	readyWithin = 2 * time.Minute  // a new replica's readiness
	warmWithin  = 15 * time.Second // the shared index's bootstrap, once listed ready
	drainWithin = 30 * time.Second // an old replica's requests in flight
)

// phase is a part of a restart run: the requests sent within [from, to).
type phase struct {
	name           string
	from, to       time.Duration
	requests       int
	prompt, cached int64
	reuse, precise int
}

func (p phase) hitRate() float64 {
	if p.prompt == 0 {
		return 0
	}
	return float64(p.cached) / float64(p.prompt)
}

// replacement is one step of a rolling restart: a new replica started, listed
// ready, then the old one deleted.
type replacement struct {
	old, new string
	// ready is how long the new replica took from its start to readiness (wall).
	ready time.Duration
	// listedAt is when (simulated, from the run's start) it was listed ready and
	// the gateway began to send it requests.
	listedAt time.Duration
	// bootstraps: the configuration's replicas fill the shared index from their
	// peers when they start; warm says the new one completed an exchange with a
	// peer (epp_shared_prefix_warm) within warmWithin of being listed, warmAt
	// when it was seen warm (simulated), warmAfterListed how long after being
	// listed (wall).
	bootstraps      bool
	warm            bool
	warmAt          time.Duration
	warmAfterListed time.Duration
	// routed and routedCold are the requests it routed, and those of them sent
	// before it was seen warm.
	routed, routedCold int
	// repaired and dropped are the blocks anti-entropy brought into its index,
	// and the peers' placements it dropped (notInPool: for an endpoint its pool
	// did not have), by the end of the run.
	repaired, dropped, notInPool float64
}

// restartResult is a run through a rolling restart, or its baseline: the same
// workload (other text) with no restart, split at the restart run's times.
type restartResult struct {
	config, title string
	replicas      int
	seed          uint64
	baseline      bool
	// run is the whole run's figures and accounting checks.
	run result
	// phases: before the first replacement, during the replacements, after.
	phases   []phase
	replaced []replacement
	// failure says why the rolling restart stopped short ("" when it ended).
	failure string
}

// rollingRestarts runs configuration c's replicas procs (in namespace ns, their
// HOMEs in home) through restartSeeds rolling restarts with traffic, replacing
// procs' elements with the new replicas, each followed, for the configurations of
// --restart-baseline, by its baseline.
func (b *bench) rollingRestarts(c configuration, ns, home string, procs []*eppProc) error {
	for g := range b.o.restartSeeds {
		seed := uint64(g + 1)
		rr, err := b.restartRun(c, ns, home, procs, seed, nil)
		if err != nil {
			return fmt.Errorf("rolling restart, seed %d: %w", seed, err)
		}
		b.logf("%s × %d, rolling restart, seed %d: %s", c.title, len(procs), seed, rr.summary())
		b.restarts = append(b.restarts, rr)
		if !slices.Contains(b.o.restartBaselines, c.name) {
			continue
		}
		base, err := b.restartRun(c, ns, home, procs, seed, &rr)
		if err != nil {
			return fmt.Errorf("the rolling restart's baseline, seed %d: %w", seed, err)
		}
		b.logf("%s × %d, no restart, seed %d: %s", c.title, len(procs), seed, base.summary())
		b.restarts = append(b.restarts, base)
	}
	return nil
}

// restartRun sends the restart workload of seed through procs and, from
// restartAt on, replaces each replica as a Deployment's rolling update does with
// its default strategy (maxSurge 25%, maxUnavailable 25%: with 3 replicas, one
// more and none fewer): a new pod (another ReplicaSet's: a new name and address)
// starts and its slice lists it not ready; once its readiness probe passes, ready,
// and the gateway sends it requests; then one old pod is deleted: its slice lists
// it terminating, the gateway sends it no new request, and once those it routes
// ended it gets SIGTERM, exits, and leaves the slices. The next new pod starts at
// once. With along (a restart run), it is that run's baseline: no replica is
// replaced, and the phases end when along's did.
func (b *bench) restartRun(c configuration, ns, home string, procs []*eppProc, seed uint64, along *restartResult) (restartResult, error) {
	n := len(procs)
	rr := restartResult{config: c.name, title: c.title, replicas: n, seed: seed, baseline: along != nil}
	spec, err := preset(workload.MultiTurn, sizeFits, 1)
	if err != nil {
		return rr, err
	}
	spec.Count = int(math.Round(spec.Rate * restartArrivals.Seconds()))
	convs, err := workload.Generate(spec, seed, salt("restart", c.name, n, seed, rr.baseline))
	if err != nil {
		return rr, err
	}
	if err := b.waitIdle(); err != nil {
		return rr, err
	}
	for _, s := range b.fleet.Servers {
		if err := s.Reset(); err != nil {
			return rr, err
		}
	}
	_ = b.fleet.TakeBalance()
	st0 := b.fleet.Stats()
	gw := loadgen.NewGateway(gatewayReplicas(procs)...)
	opts := loadgen.Options{Clock: b.fleet.Clock, Gateway: gw, Servers: b.servers, Model: b.o.sim.cfg.Model,
		Seed: seed, RunID: fmt.Sprintf("restart-%s%d-%d", c.name, n, seed), Timeout: 30 * time.Second, Start: b.fleet.Clock.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	done := make(chan []loadgen.Record, 1)
	go func() { done <- loadgen.Run(ctx, opts, convs) }()

	b.fleet.Clock.SleepUntil(ctx, opts.Start+restartAt)
	begin := b.fleet.Clock.Now() - opts.Start
	hash := fmt.Sprintf("%016x", salt("replicaset", c.name, n, seed))[:9]
	var stops sync.WaitGroup
	var mu sync.Mutex
	var stopErrs []string
	var watchers sync.WaitGroup
	replaced := make([]*replacement, 0, n)
	toReplace := procs
	if along != nil {
		toReplace = nil
		begin = along.phases[1].from
	}
	for k := range toReplace {
		old := procs[k]
		// Another ReplicaSet's pod: a name and an address of its own, the slice
		// of its own (each replica has a peer-sync port of its own here).
		slice := n*int(seed) + k
		rp, p, err := b.replace(c, ns, home, gw, opts, slice, eppreplica.NewInReplicaSet(slice, hash), &watchers)
		if err != nil {
			rr.failure = fmt.Sprintf("replacing %s: %v", old.Pod, err)
			b.logf("%s × %d, rolling restart, seed %d: %s", c.title, n, seed, rr.failure)
			break
		}
		rp.old = old.Pod
		replaced = append(replaced, rp)
		procs[k] = p
		// The old pod is deleted: listed terminating, no new request, SIGTERM once
		// its requests ended, gone from the slices once it exited.
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, old.slice, old.Replica, "routingbench", slicegen.TerminatingServing()); err != nil {
			return rr, err
		}
		gw.Remove(old.Pod)
		stops.Go(func() {
			var errs []error
			errs = append(errs, gw.Drain(old.Pod, drainWithin), old.process.Stop(), old.client.Close(),
				eppreplica.DeleteSyncSlice(context.Background(), b.env.Clientset, ns, old.slice))
			if err := errors.Join(errs...); err != nil {
				line, _, _ := strings.Cut(err.Error(), "\n")
				mu.Lock()
				stopErrs = append(stopErrs, fmt.Sprintf("stopping %s: %s", old.Pod, line))
				mu.Unlock()
			}
		})
	}
	end := b.fleet.Clock.Now() - opts.Start
	if along != nil {
		end = along.phases[1].to
	}
	records := <-done
	wall := time.Since(start)
	stops.Wait()
	watchers.Wait()
	if err := b.waitIdle(); err != nil {
		return rr, err
	}
	st1 := b.fleet.Stats()

	rr.run = summarize(records, convs, b.o.sim.cfg.BlockTokens)
	rr.run.config, rr.run.title, rr.run.replicas, rr.run.kind, rr.run.size, rr.run.seed = c.name, c.title, n, workload.MultiTurn, sizeFits, seed
	rr.run.wall = wall
	rr.run.imbalance = b.fleet.TakeBalance().Imbalance()
	rr.run.server = diff(st1, st0)
	rr.run.check()
	rr.run.problems = append(rr.run.problems, stopErrs...)
	last := convs[len(convs)-1].Arrival
	rr.phases = []phase{
		{name: "before", from: restartWarmup, to: begin},
		{name: "during", from: begin, to: end},
		{name: "after", from: end, to: max(end, last)},
	}
	for _, rec := range records {
		for i := range rr.phases {
			if p := &rr.phases[i]; rec.Err == "" && rec.Sent >= p.from && rec.Sent < p.to {
				p.requests++
				p.prompt += int64(rec.ServerPromptTokens)
				p.cached += int64(rec.CachedTokens)
				if reuse, precise := reuses(rec, b.o.sim.cfg.BlockTokens); reuse {
					p.reuse++
					if precise {
						p.precise++
					}
				}
			}
		}
		for _, rp := range replaced {
			if rec.Replica == rp.new {
				rp.routed++
				if !rp.warm || rec.Sent < rp.warmAt {
					rp.routedCold++
				}
			}
		}
	}
	for k, rp := range replaced {
		if c.sharesIndex {
			m, err := scrapeMetrics(procs[k].Metrics)
			if err != nil {
				return rr, err
			}
			rp.repaired, rp.dropped, rp.notInPool = m.repairReceived, m.dropped, m.notInPool
		}
		rr.replaced = append(rr.replaced, *rp)
	}
	if rr.failure != "" {
		return rr, errors.New(rr.failure)
	}
	return rr, nil
}

// replace starts replica r of configuration c, the slice-th of the Service's
// slices, as a new pod of the rolling update (listed not ready, then ready once
// its readiness probe passes, then in the gateway's list), and, for a
// configuration that shares the index, watches (watchers) for its bootstrap.
func (b *bench) replace(c configuration, ns, home string, gw *loadgen.Gateway, opts loadgen.Options, slice int, r *eppreplica.Replica, watchers *sync.WaitGroup) (*replacement, *eppProc, error) {
	ctx := context.Background()
	launched := time.Now()
	ps, err := b.startReplicas(ns, home, []*eppreplica.Replica{r}, c)
	if err != nil || len(ps) != 1 {
		stopReplicas(ps)
		return nil, nil, fmt.Errorf("starting %s: %w", r.Pod, err)
	}
	p := ps[0]
	p.slice = slice
	fail := func(err error) (*replacement, *eppProc, error) {
		stopReplicas(ps)
		_ = eppreplica.DeleteSyncSlice(ctx, b.env.Clientset, ns, slice)
		return nil, nil, err
	}
	if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, slice, r, "routingbench", slicegen.NotReady()); err != nil {
		return fail(err)
	}
	// The kubelet's readiness probe (gRPC health, readiness service): the first
	// as the container starts, when nothing listens yet, then every
	// readinessPeriod. (Upstream's readiness is SERVING as soon as the EPP
	// listens, in standalone mode before it has listed the model servers: a probe
	// at that moment would have the gateway send it requests it cannot route yet.)
	for probe := launched.Add(readinessPeriod); ; probe = probe.Add(readinessPeriod) {
		select {
		case <-p.process.Exited():
			return fail(fmt.Errorf("%s exited (%w); its output:\n%s", r.Pod, p.process.ExitError(), tail(p.process.Output().String())))
		case <-time.After(time.Until(probe)):
		}
		if st, err := p.Ready(ctx); err == nil && st == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Since(launched) > readyWithin {
			return fail(fmt.Errorf("%s not ready within %v; its output:\n%s", r.Pod, readyWithin, tail(p.process.Output().String())))
		}
	}
	rp := &replacement{new: r.Pod, ready: time.Since(launched), bootstraps: c.sharesIndex}
	if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, slice, r, "routingbench"); err != nil {
		return fail(err)
	}
	listed := time.Now()
	rp.listedAt = opts.Clock.Now() - opts.Start
	gw.Add(p.gatewayReplica())
	if c.sharesIndex {
		watchers.Go(func() {
			for deadline := listed.Add(warmWithin); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if m, err := scrapeMetrics(p.Metrics); err == nil && m.warm == 1 {
					rp.warm, rp.warmAt, rp.warmAfterListed = true, opts.Clock.Now()-opts.Start, time.Since(listed)
					return
				}
			}
		})
	}
	return rp, p, nil
}

// phaseFigures is a phase's hit rate and precision, or "–" without requests.
func (p phase) figures() string {
	if p.requests == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f (precision %.2f, %d requests)", p.hitRate(), ratio(p.precise, p.reuse), p.requests)
}

func (rr restartResult) summary() string {
	var parts []string
	if rr.baseline {
		parts = append(parts, "no restart")
	}
	for _, p := range rr.phases {
		parts = append(parts, fmt.Sprintf("%s %s", p.name, p.figures()))
	}
	for _, rp := range rr.replaced {
		s := fmt.Sprintf("%s → %s ready after %v, routed %d", rp.old, rp.new, rp.ready.Round(time.Millisecond), rp.routed)
		if rp.bootstraps {
			if rp.warm {
				s += fmt.Sprintf(", warm %v after it was listed ready, %d routed before", rp.warmAfterListed.Round(time.Millisecond), rp.routedCold)
				s += fmt.Sprintf(", %.0f blocks repaired into its index, %.0f peers' placements dropped (%.0f not in its pool)", rp.repaired, rp.dropped, rp.notInPool)
			} else {
				s += fmt.Sprintf(", NOT warm within %v of being listed ready", warmWithin)
			}
		}
		parts = append(parts, s)
	}
	s := strings.Join(parts, "; ") + fmt.Sprintf("; %d/%d answered", rr.run.answered, rr.run.want)
	if len(rr.run.problems) > 0 {
		s += fmt.Sprintf("; PROBLEMS: %v", rr.run.problems)
	}
	return s
}
