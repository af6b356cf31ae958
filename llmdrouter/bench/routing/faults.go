package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/loadgen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// The fault runs: the multi-turn workload that fits, with one replica (the
// second) faulted under traffic (simulated times, from the run's start; the
// faults themselves last wall time, as a real freeze does).
const (
	// faultArrivals: sessions arrive over this long: short enough that no
	// server's LRU fills, so that the replicas' indexes can be compared whole.
	faultArrivals = 40 * time.Second
	// faultAt: the fault starts then.
	faultAt = 12 * time.Second
	// faultWindow: the hit rate is taken over this long after the fault ends,
	// against the same window of the same seed with no fault.
	faultWindow = 30 * time.Second
	// frozenFor: a freeze (SIGSTOP) lasts this long, wall time: past the TTL.
	frozenFor = 2 * time.Second
	// caughtUpWithin bounds the wait for every replica to have every frame its
	// peers published before the fault ended.
	caughtUpWithin = 30 * time.Second
)

// The faults.
const (
	faultFreeze = "freeze" // SIGSTOP for frozenFor, then SIGCONT
	faultReset  = "reset"  // its peer-sync connections reset by the kernel (ss -K)
	faultKill   = "kill"   // SIGKILL, then started again (a container restart: the same pod, a new process)
)

var faultKinds = []string{faultFreeze, faultReset, faultKill}

// faultResult is a run through a fault, or its baseline (the same seed, other
// text, no fault, the window at the fault run's times).
type faultResult struct {
	config, title string
	replicas      int
	seed          uint64
	fault         string
	baseline      bool
	run           result
	// window: the requests sent within faultWindow after the fault ended.
	window phase
	// caughtUp: from the fault's end until every replica had every frame its
	// peers published before it ended, and missed none (wall; -1: not within
	// caughtUpWithin).
	caughtUp time.Duration
	// At the end, the traffic over: whether the indexes hold the same blocks
	// (digests), the blocks one holds that another does not (lost, per server:
	// the most any replica holds less than the one that holds most), whether a
	// server's LRU was full (then the indexes may differ by their order).
	agree bool
	lost  int
	full  bool
	// resent, resyncs: frames resent and resyncs served, every replica.
	resent, resyncs float64
	failure         string
}

// faults runs configuration c's replicas procs through each fault, faultSeeds
// times, each followed by its baseline.
func (b *bench) faults(c configuration, ns, home string, procs []*eppProc) error {
	for g := range b.o.faultSeeds {
		seed := uint64(g + 1)
		for _, kind := range b.o.faultKinds {
			fr, err := b.faultRun(c, ns, home, procs, seed, kind, nil)
			if err != nil {
				return fmt.Errorf("fault %s, seed %d: %w", kind, seed, err)
			}
			b.logf("%s × %d, fault %s, seed %d: %s", c.title, len(procs), kind, seed, fr.summary())
			b.faultResults = append(b.faultResults, fr)
			base, err := b.faultRun(c, ns, home, procs, seed, kind, &fr)
			if err != nil {
				return fmt.Errorf("fault %s's baseline, seed %d: %w", kind, seed, err)
			}
			b.logf("%s × %d, no fault (%s's baseline), seed %d: %s", c.title, len(procs), kind, seed, base.summary())
			b.faultResults = append(b.faultResults, base)
		}
	}
	return nil
}

// faultRun sends the fault workload of seed through procs and, at faultAt, faults
// the second replica (along: this is that run's baseline, with no fault).
func (b *bench) faultRun(c configuration, ns, home string, procs []*eppProc, seed uint64, kind string, along *faultResult) (faultResult, error) {
	n := len(procs)
	fr := faultResult{config: c.name, title: c.title, replicas: n, seed: seed, fault: kind, baseline: along != nil, caughtUp: -1}
	spec, err := preset(workload.MultiTurn, sizeFits, 1)
	if err != nil {
		return fr, err
	}
	spec.Count = int(math.Round(spec.Rate * faultArrivals.Seconds()))
	convs, err := workload.Generate(spec, seed, salt("fault", kind, c.name, n, seed, fr.baseline))
	if err != nil {
		return fr, err
	}
	if err := b.waitIdle(); err != nil {
		return fr, err
	}
	for _, s := range b.fleet.Servers {
		if err := s.Reset(); err != nil {
			return fr, err
		}
	}
	_ = b.fleet.TakeBalance()
	st0 := b.fleet.Stats()
	resent0, resyncs0 := broadcastTotals(procs)
	gw := loadgen.NewGateway(gatewayReplicas(procs)...)
	opts := loadgen.Options{Clock: b.fleet.Clock, Gateway: gw, Servers: b.servers, Model: b.o.sim.cfg.Model,
		Seed: seed, RunID: fmt.Sprintf("fault-%s-%s%d-%d-%v", kind, c.name, n, seed, fr.baseline), Timeout: 30 * time.Second, Start: b.fleet.Clock.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	done := make(chan []loadgen.Record, 1)
	go func() { done <- loadgen.Run(ctx, opts, convs) }()

	b.fleet.Clock.SleepUntil(ctx, opts.Start+faultAt)
	var faultEnd time.Duration
	if along != nil {
		faultEnd = along.window.from
	} else {
		if err := b.inject(c, ns, home, gw, procs, kind); err != nil {
			fr.failure = err.Error()
		}
		faultEnd = b.fleet.Clock.Now() - opts.Start
		if fr.failure == "" {
			fr.caughtUp = catchUp(procs, caughtUpWithin)
		}
	}
	records := <-done
	wall := time.Since(start)
	if err := b.waitIdle(); err != nil {
		return fr, err
	}
	st1 := b.fleet.Stats()
	fr.run = summarize(records, convs, b.o.sim.cfg.BlockTokens)
	fr.run.config, fr.run.title, fr.run.replicas, fr.run.kind, fr.run.size, fr.run.seed = c.name, c.title, n, workload.MultiTurn, sizeFits, seed
	fr.run.wall = wall
	fr.run.imbalance = b.fleet.TakeBalance().Imbalance()
	fr.run.server = diff(st1, st0)
	fr.run.check()
	fr.window = phase{name: "after", from: faultEnd, to: faultEnd + faultWindow}
	for _, rec := range records {
		if p := &fr.window; rec.Err == "" && rec.Sent >= p.from && rec.Sent < p.to {
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
	// The traffic over, the indexes compared once what is on its way arrived.
	if err := compareIndexes(procs, &fr, 5*time.Second); err != nil {
		return fr, err
	}
	resent1, resyncs1 := broadcastTotals(procs)
	fr.resent, fr.resyncs = resent1-resent0, resyncs1-resyncs0
	if fr.failure != "" {
		return fr, errors.New(fr.failure)
	}
	return fr, nil
}

// inject faults the second replica of procs (kind); it returns when the fault is
// over (the replica runs again).
func (b *bench) inject(c configuration, ns, home string, gw *loadgen.Gateway, procs []*eppProc, kind string) error {
	p := procs[1]
	pid := p.process.Pid()
	switch kind {
	case faultFreeze:
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(frozenFor)
		return syscall.Kill(pid, syscall.SIGCONT)
	case faultReset:
		ss, err := exec.LookPath("ss")
		if err != nil {
			return fmt.Errorf("the reset fault needs ss(8) (iproute2): %w", err)
		}
		if out, err := exec.Command(ss, "-K", "src", p.IP, "or", "dst", p.IP).CombinedOutput(); err != nil {
			return fmt.Errorf("ss -K: %w: %s", err, out)
		}
		return nil
	case faultKill:
		// The container dies: its pod is not ready (the gateway stops sending it
		// requests), the kubelet starts the container again (the same pod name
		// and address, a new process), ready once its probe passes.
		ctx := context.Background()
		gw.Remove(p.Pod)
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, p.slice, p.Replica, "routingbench", slicegen.NotReady()); err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return err
		}
		<-p.process.Exited()
		_ = p.client.Close()
		launched := time.Now()
		ps, err := b.startReplicas(ns, home, []*eppreplica.Replica{p.Replica}, c.config)
		if err != nil || len(ps) != 1 {
			stopReplicas(ps)
			return fmt.Errorf("starting %s again: %w", p.Pod, err)
		}
		np := ps[0]
		np.slice = p.slice
		// The kubelet's readiness probe, every readinessPeriod from the start (see
		// replace).
		for probe := launched.Add(readinessPeriod); ; probe = probe.Add(readinessPeriod) {
			time.Sleep(time.Until(probe))
			if st, err := np.Ready(ctx); err == nil && st == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Since(launched) > readyWithin {
				return fmt.Errorf("%s not ready again within %v", p.Pod, readyWithin)
			}
		}
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, np.slice, np.Replica, "routingbench"); err != nil {
			return err
		}
		procs[1] = np
		gw.Add(np.gatewayReplica())
		return nil
	}
	return fmt.Errorf("unknown fault %q: want one of %s", kind, strings.Join(faultKinds, ", "))
}

// broadcastOf is the replica's shared index broadcast, as /debug/peer-sync shows it.
func broadcastOf(p *eppProc) (peersync.BroadcastStatus, error) {
	resp, err := httpClient.Get("http://" + p.Debug + "/debug/peer-sync?key=-")
	if err != nil {
		return peersync.BroadcastStatus{}, err
	}
	defer resp.Body.Close()
	var doc peersync.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return peersync.BroadcastStatus{}, err
	}
	for _, b := range doc.Broadcasts {
		if b.Name == sharedprefix.BroadcastName(sharedIndexPlugin) {
			return b, nil
		}
	}
	return peersync.BroadcastStatus{}, fmt.Errorf("%s has no broadcast %s", p.Pod, sharedprefix.BroadcastName(sharedIndexPlugin))
}

// indexOf is the replica's shared index, as its debug address serves it.
func indexOf(p *eppProc) (sharedprefix.Index, error) {
	var st sharedprefix.Index
	resp, err := httpClient.Get("http://" + p.Debug + sharedprefix.DebugPath(sharedIndexPlugin))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

// catchUp polls the replicas (every 10 ms, at most within) until each has seen
// every frame each peer had published when it began, and misses none; it returns
// how long that took, -1 if it did not happen within.
func catchUp(procs []*eppProc, within time.Duration) time.Duration {
	start := time.Now()
	target := map[string]uint64{}
	for _, p := range procs {
		if b, err := broadcastOf(p); err == nil {
			target[p.Pod] = b.Seq
		}
	}
	for time.Since(start) < within {
		if caughtUp(procs, target) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

func caughtUp(procs []*eppProc, target map[string]uint64) bool {
	for _, p := range procs {
		b, err := broadcastOf(p)
		if err != nil || b.Missing != 0 {
			return false
		}
		seen := map[string]uint64{}
		for _, ps := range b.Peers {
			_, name, _ := strings.Cut(ps.Peer, "/")
			seen[name] = ps.Seq
		}
		for _, o := range procs {
			if o != p && seen[o.Pod] < target[o.Pod] {
				return false
			}
		}
	}
	return true
}

// compareIndexes waits (at most within) until the replicas' digests agree, and
// records in fr whether they did, the blocks lost, and whether an LRU was full.
func compareIndexes(procs []*eppProc, fr *faultResult, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var sts []sharedprefix.Index
		for _, p := range procs {
			st, err := indexOf(p)
			if err != nil {
				return err
			}
			sts = append(sts, st)
		}
		fr.agree, fr.lost, fr.full = true, 0, false
		most := map[string]int{}
		for _, st := range sts {
			fr.agree = fr.agree && st.Digest == sts[0].Digest
			for _, s := range st.Servers {
				most[s.Server] = max(most[s.Server], s.Blocks)
				fr.full = fr.full || s.Blocks >= s.Capacity
			}
		}
		for _, st := range sts {
			held := map[string]int{}
			for _, s := range st.Servers {
				held[s.Server] = s.Blocks
			}
			for server, m := range most {
				fr.lost = max(fr.lost, m-held[server])
			}
		}
		if fr.agree || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// broadcastTotals are the frames resent and the resyncs served by every replica.
func broadcastTotals(procs []*eppProc) (resent, resyncs float64) {
	for _, p := range procs {
		b, err := broadcastOf(p)
		if err != nil {
			continue
		}
		for _, ps := range b.Peers {
			resent += ps.Resent
			resyncs += ps.ResyncsServed
		}
	}
	return resent, resyncs
}

func (fr faultResult) summary() string {
	s := fmt.Sprintf("window %s", fr.window.figures())
	if !fr.baseline {
		caught := "NOT caught up"
		if fr.caughtUp >= 0 {
			caught = "caught up after " + fr.caughtUp.Round(time.Millisecond).String()
		}
		s += fmt.Sprintf(", %s, %.0f frames resent, %.0f resyncs", caught, fr.resent, fr.resyncs)
	}
	s += fmt.Sprintf(", indexes agree %v (%d blocks lost, an LRU full %v); %d/%d answered", fr.agree, fr.lost, fr.full, fr.run.answered, fr.run.want)
	if len(fr.run.problems) > 0 {
		s += fmt.Sprintf("; PROBLEMS: %v", fr.run.problems)
	}
	return s
}

// Issue 37's targets for the faults.
const (
	targetCaughtUp = 2 * time.Second // after the fault ends
)

// faultTable is the fault runs and their targets.
func (b *bench) faultTable() string {
	if len(b.faultResults) == 0 {
		return ""
	}
	spec, _ := preset(workload.MultiTurn, sizeFits, 1)
	spec.Count = int(math.Round(spec.Rate * faultArrivals.Seconds()))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**Through faults** (multi-turn, fits: %s). At %v of simulated time, the second replica is faulted under traffic: frozen (SIGSTOP) for %v of wall time, past the TTL, then SIGCONT; its peer-sync connections reset by the kernel (`ss -K`); or killed (SIGKILL) and started again as its container would be (the same pod name and address, listed not ready meanwhile, the gateway sending it nothing). Caught up: from the fault's end until every replica had every frame its peers had published by then, none missing (target ≤ %v). Lost: once the traffic is over, the blocks the index of one replica holds fewer than another's for a server (target 0; the digests agree). Hit rate: the requests sent in the %v after the fault ended, against the same window of the same seed with no fault (other text), and their ratio (target ≥ %.2f).\n\n",
		describe(spec), faultAt, frozenFor, targetCaughtUp, faultWindow, targetHitRatio)
	sb.WriteString("| configuration | replicas | fault | seed | caught up after | frames resent, resyncs | placements lost | indexes agree | hit rate after (no fault) | ratio | errors |\n")
	sb.WriteString("|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, fr := range b.faultResults {
		if fr.baseline {
			continue
		}
		var base *faultResult
		for i := range b.faultResults {
			o := &b.faultResults[i]
			if o.baseline && o.config == fr.config && o.fault == fr.fault && o.seed == fr.seed && o.replicas == fr.replicas {
				base = o
			}
		}
		caught := fmt.Sprintf("**not within %v**", caughtUpWithin)
		if fr.caughtUp >= 0 {
			caught = fmt.Sprintf("%s: %s", millis(float64(fr.caughtUp)), verdict(fr.caughtUp <= targetCaughtUp))
		}
		agree := "yes"
		switch {
		case !fr.agree && fr.full:
			agree = "no (an LRU was full)"
		case !fr.agree:
			agree = "**no**"
		}
		lost := fmt.Sprintf("%d: %s", fr.lost, verdict(fr.lost == 0))
		if fr.full {
			lost = fmt.Sprintf("%d (an LRU was full)", fr.lost)
		}
		hit, rat := fmt.Sprintf("%.3f", fr.window.hitRate()), "–"
		if base != nil && base.window.requests > 0 {
			hit += fmt.Sprintf(" (%.3f)", base.window.hitRate())
			r := fr.window.hitRate() / base.window.hitRate()
			rat = fmt.Sprintf("%.3f: %s", r, verdict(r >= targetHitRatio))
		}
		errs := fr.run.errors + len(fr.run.problems)
		cells := []string{fr.title, fmt.Sprint(fr.replicas), fr.fault, fmt.Sprint(fr.seed), caught,
			fmt.Sprintf("%.0f, %.0f", fr.resent, fr.resyncs), lost, agree, hit, rat, fmt.Sprint(errs)}
		sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return sb.String()
}

// validFaults checks --fault-kinds.
func validFaults(kinds []string) error {
	for _, k := range kinds {
		if !slices.Contains(faultKinds, k) {
			return fmt.Errorf("unknown fault %q: want %s", k, strings.Join(faultKinds, ", "))
		}
	}
	return nil
}
