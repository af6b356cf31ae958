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

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/loadgen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// The fault runs: the multi-turn workload that fits, at faultRate times its rate,
// with one replica (the second) faulted under traffic once every server's cache and
// every index is full (simulated times, from the run's start; the faults
// themselves last wall time, as a real freeze does).
const (
	// faultRate multiplies the workload's arrival rate: about 100 requests a
	// second of wall time at the default speed-up (4), so that a freeze of 15 s
	// leaves about 1,500 placements behind.
	faultRate = 2
	// faultAt: the fault starts then: by then the sessions have routed several
	// times the fleet's caches (and each server's index, of the same capacity).
	faultAt = 45 * time.Second
	// faultWindow: the hit rate is taken over this long after the fault ends,
	// against the same window of the same seed with no fault.
	faultWindow = 30 * time.Second
	// agreeWithin bounds the wait (wall) for every pair of replicas to agree
	// after the fault healed.
	agreeWithin = 30 * time.Second
	// flapFor: a flap takes the replica out of the peer set (and the gateway's
	// list) for this long, wall time.
	flapFor = 5 * time.Second
	// skewBy: the skewed replica's clock runs this far ahead.
	skewBy = 3 * time.Second
)

// The faults.
const (
	faultFreeze     = "freeze"     // SIGSTOP for 2 s, then SIGCONT
	faultFreezeLong = "freeze-15s" // SIGSTOP for 15 s, then SIGCONT
	faultReset      = "reset"      // its peer-sync connections reset by the kernel (ss -K)
	faultKill       = "kill"       // SIGKILL, then started again; the gateway retries on another replica
	faultFlap       = "flap"       // not ready for flapFor (out of the peer set and of the gateway), then ready
	faultSkew       = "clock-skew" // the replica's clock runs skewBy ahead, the whole run
)

var faultKinds = []string{faultFreeze, faultFreezeLong, faultReset, faultKill, faultFlap, faultSkew}

// faultLasts is about how long (wall) fault kind takes, until the replica runs
// again, listed: sessions arrive until the window after it is over.
func faultLasts(kind string) time.Duration {
	switch kind {
	case faultFreeze, faultFreezeLong:
		return frozenFor(kind)
	case faultKill, faultFlap:
		return 10 * time.Second
	}
	return 0
}

// frozenFor is how long a freeze lasts (wall).
func frozenFor(kind string) time.Duration {
	if kind == faultFreezeLong {
		return 15 * time.Second
	}
	return 2 * time.Second
}

// faultResult is a run through a fault, or its baseline (the same seed, other
// text, no fault, the windows at the fault run's times; a freeze's baseline has
// the gateway hold the requests sent to the replica as long as the freeze lasted,
// the replica running: a frozen replica's requests wait and their sessions fall
// behind, which changes the traffic after it whatever the index does).
type faultResult struct {
	config, title string
	replicas      int
	seed          uint64
	fault         string
	baseline      bool
	run           result
	// window: the requests sent within faultWindow after the fault ended.
	window phase
	// agreed: from the fault's end until every pair of replicas had completed an
	// anti-entropy exchange that ended with both holding the same (their
	// per-server digests equal, but for the leaves changed within the last
	// 100 ms on either side: what is on its way); -1: not within agreeWithin.
	agreed time.Duration
	// At the end, the traffic over: the servers whose digests differ between two
	// replicas (0: every replica holds the same blocks with the same stamps).
	differing int
	// repaired: blocks anti-entropy brought into the replicas' indexes.
	repaired float64
	// lost: requests that failed, by phase (before the fault, during it, after);
	// retried: requests a second replica routed after the first one failed.
	lost    [3]int
	retried int
	failure string
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

// faultSpec is the fault runs' workload, for fault kind at speed-up (simulated
// seconds a second): sessions arrive until faultWindow after the fault ends, and
// 10 s more.
func faultSpec(kind string, speedup float64) (workload.Spec, error) {
	spec, err := preset(workload.MultiTurn, sizeFits, 1)
	if err != nil {
		return spec, err
	}
	spec.Rate *= faultRate
	arrivals := faultAt + time.Duration(float64(faultLasts(kind))*speedup) + faultWindow + 10*time.Second
	spec.Count = int(math.Round(spec.Rate * arrivals.Seconds()))
	return spec, nil
}

// faultRun sends the fault workload of seed through procs and, at faultAt, faults
// the second replica (along: this is that run's baseline, with no fault; for a
// freeze, the gateway holds the replica's requests as long).
func (b *bench) faultRun(c configuration, ns, home string, procs []*eppProc, seed uint64, kind string, along *faultResult) (faultResult, error) {
	n := len(procs)
	fr := faultResult{config: c.name, title: c.title, replicas: n, seed: seed, fault: kind, baseline: along != nil, agreed: -1}
	spec, err := faultSpec(kind, b.o.sim.speedup)
	if err != nil {
		return fr, err
	}
	convs, err := workload.Generate(spec, seed, salt("fault", kind, c.name, n, seed, fr.baseline))
	if err != nil {
		return fr, err
	}
	if kind == faultSkew && along == nil {
		// The whole run with a clock skewed: started again so, and the replicas
		// agreed, before the run.
		if err := b.restartSecond(c, ns, home, procs, []string{sharedprefix.ClockOffsetEnv + "=" + skewBy.String()}); err != nil {
			return fr, err
		}
		defer func() {
			if err := b.restartSecond(c, ns, home, procs, nil); err != nil {
				fr.failure = err.Error()
			}
		}()
	}
	if err := b.waitIdle(); err != nil {
		return fr, err
	}
	if _, err := agreeAfter(procs, time.Now(), agreeWithin); err != nil {
		return fr, fmt.Errorf("the replicas did not agree before the run: %w", err)
	}
	for _, s := range b.fleet.Servers {
		if err := s.Reset(); err != nil {
			return fr, err
		}
	}
	_ = b.fleet.TakeBalance()
	st0 := b.fleet.Stats()
	m0, err := scrapeAll(procs)
	if err != nil {
		return fr, err
	}
	procs0 := slices.Clone(procs) // whose counters m0 holds
	gw := loadgen.NewGateway(gatewayReplicas(procs)...)
	opts := loadgen.Options{Clock: b.fleet.Clock, Gateway: gw, Servers: b.servers, Model: b.o.sim.cfg.Model, Retry: kind == faultKill,
		Seed: seed, RunID: fmt.Sprintf("fault-%s-%s%d-%d-%v", kind, c.name, n, seed, fr.baseline), Timeout: 30 * time.Second, Start: b.fleet.Clock.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	done := make(chan []loadgen.Record, 1)
	go func() { done <- loadgen.Run(ctx, opts, convs) }()

	b.fleet.Clock.SleepUntil(ctx, opts.Start+faultAt)
	var faultEnd time.Duration
	switch {
	case along != nil:
		if kind == faultFreeze || kind == faultFreezeLong {
			// What the freeze does to the traffic, without what it does to the
			// index: the requests sent to the replica wait as long, it runs.
			release := gw.Hold(procs[1].Pod)
			time.Sleep(frozenFor(kind))
			release()
		}
		faultEnd = along.window.from
	default:
		if err := b.inject(c, ns, home, gw, procs, kind); err != nil {
			fr.failure = err.Error()
		}
		faultEnd = b.fleet.Clock.Now() - opts.Start
		if fr.failure == "" {
			if fr.agreed, err = agreeAfter(procs, time.Now(), agreeWithin); err != nil {
				b.logf("%s × %d, fault %s, seed %d: %v", c.title, n, kind, seed, err)
			}
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
	if kind != faultKill {
		fr.run.check() // a killed replica fails what it was routing
	}
	fr.window = phase{name: "after", from: faultEnd, to: faultEnd + faultWindow}
	for _, rec := range records {
		if rec.Retried {
			fr.retried++
		}
		if rec.Err != "" {
			switch {
			case rec.Sent < faultAt:
				fr.lost[0]++
			case rec.Sent < faultEnd:
				fr.lost[1]++
			default:
				fr.lost[2]++
			}
			continue
		}
		if p := &fr.window; rec.Sent >= p.from && rec.Sent < p.to {
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
	if fr.differing, err = differingServers(procs, 5*time.Second); err != nil {
		return fr, err
	}
	m1, err := scrapeAll(procs)
	if err != nil {
		return fr, err
	}
	for i := range m1 {
		if i < len(m0) {
			d := m1[i].repairReceived - m0[i].repairReceived
			if procs[i] != procs0[i] {
				// Started again during the run, its counters from 0: what it
				// repaired since (its bootstrap and after); the old one's are gone.
				d = m1[i].repairReceived
			}
			fr.repaired += d
		}
	}
	if fr.failure != "" {
		return fr, errors.New(fr.failure)
	}
	return fr, nil
}

// inject faults the second replica of procs (kind); it returns when the fault is
// over (the replica runs again, listed).
func (b *bench) inject(c configuration, ns, home string, gw *loadgen.Gateway, procs []*eppProc, kind string) error {
	p := procs[1]
	pid := p.process.Pid()
	ctx := context.Background()
	switch kind {
	case faultFreeze, faultFreezeLong:
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(frozenFor(kind))
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
	case faultFlap:
		// Not ready: its peers drop it, it drops them, and the gateway sends it
		// nothing; then ready again.
		gw.Remove(p.Pod)
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, p.slice, p.Replica, "routingbench", slicegen.NotReady()); err != nil {
			return err
		}
		time.Sleep(flapFor)
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, p.slice, p.Replica, "routingbench"); err != nil {
			return err
		}
		gw.Add(p.gatewayReplica())
		return nil
	case faultSkew:
		return nil // the whole run (faultRun)
	case faultKill:
		// The container dies: the gateway retries the requests it was routing on
		// another replica; its pod is not ready (the gateway sends it nothing);
		// the kubelet starts the container again (the same pod name and address, a
		// new process), ready once its probe passes.
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return err
		}
		gw.Remove(p.Pod)
		if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, p.slice, p.Replica, "routingbench", slicegen.NotReady()); err != nil {
			return err
		}
		<-p.process.Exited()
		_ = p.client.Close()
		np, err := b.startAgain(c, ns, home, p, nil)
		if err != nil {
			return err
		}
		procs[1] = np
		gw.Add(np.gatewayReplica())
		return nil
	}
	return fmt.Errorf("unknown fault %q: want one of %s", kind, strings.Join(faultKinds, ", "))
}

// startAgain starts replica p again (the same pod, a new process, with env),
// waits for its readiness as the kubelet's probe would, and lists it ready.
func (b *bench) startAgain(c configuration, ns, home string, p *eppProc, env []string) (*eppProc, error) {
	ctx := context.Background()
	launched := time.Now()
	ps, err := b.startReplicasWith(ns, home, []*eppreplica.Replica{p.Replica}, c, env)
	if err != nil || len(ps) != 1 {
		stopReplicas(ps)
		return nil, fmt.Errorf("starting %s again: %w", p.Pod, err)
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
			return nil, fmt.Errorf("%s not ready again within %v", p.Pod, readyWithin)
		}
	}
	if err := eppreplica.WriteSyncSlice(ctx, b.env.Clientset, ns, np.slice, np.Replica, "routingbench"); err != nil {
		return nil, err
	}
	return np, nil
}

// restartSecond stops the second replica of procs and starts it again with env.
func (b *bench) restartSecond(c configuration, ns, home string, procs []*eppProc, env []string) error {
	p := procs[1]
	if err := eppreplica.WriteSyncSlice(context.Background(), b.env.Clientset, ns, p.slice, p.Replica, "routingbench", slicegen.NotReady()); err != nil {
		return err
	}
	_ = p.process.Stop()
	_ = p.client.Close()
	np, err := b.startAgain(c, ns, home, p, env)
	if err != nil {
		return err
	}
	procs[1] = np
	return nil
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

// agreeAfter polls the replicas (every 20 ms, at most within) until every pair has
// agreed (an anti-entropy exchange that ended with both holding the same) since
// healed, and returns how long after healed the last pair did.
func agreeAfter(procs []*eppProc, healed time.Time, within time.Duration) (time.Duration, error) {
	var why string
	for time.Since(healed) < within {
		latest, ok := time.Time{}, true
		why = ""
		for _, p := range procs {
			polled := time.Now()
			st, err := indexOf(p)
			if err != nil {
				return -1, err
			}
			agreed := map[string]time.Time{}
			for _, pa := range st.Peers {
				if pa.AgreedSecondsAgo != nil {
					agreed[pa.Peer] = polled.Add(-time.Duration(*pa.AgreedSecondsAgo * float64(time.Second)))
				}
			}
			for _, o := range procs {
				if o == p {
					continue
				}
				var at time.Time
				seen := false
				for peer, t := range agreed {
					if strings.HasSuffix(peer, "/"+o.Pod) {
						at, seen = t, true
					}
				}
				if !seen || at.Before(healed) {
					ok = false
					why = fmt.Sprintf("%s has not agreed with %s since the fault healed", p.Pod, o.Pod)
					break
				}
				if at.After(latest) {
					latest = at
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return max(latest.Sub(healed), 0), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1, fmt.Errorf("not within %v: %s", within, why)
}

// differingServers waits (at most within) until every replica holds the same as
// the first one, server by server (their digests, not counts), and returns the
// servers that still differ.
func differingServers(procs []*eppProc, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		var first map[string]string
		differ := map[string]bool{}
		for i, p := range procs {
			st, err := indexOf(p)
			if err != nil {
				return 0, err
			}
			digests := map[string]string{}
			for _, s := range st.Servers {
				digests[s.Server] = s.Digest
			}
			if i == 0 {
				first = digests
				continue
			}
			for s := range first {
				if digests[s] != first[s] {
					differ[s] = true
				}
			}
			for s := range digests {
				if digests[s] != first[s] {
					differ[s] = true
				}
			}
		}
		if len(differ) == 0 || time.Now().After(deadline) {
			return len(differ), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (fr faultResult) summary() string {
	s := fmt.Sprintf("window %s", fr.window.figures())
	if !fr.baseline {
		agreed := "NOT agreed"
		if fr.agreed >= 0 {
			agreed = "every pair agreed " + fr.agreed.Round(time.Millisecond).String() + " after it healed"
		}
		s += fmt.Sprintf(", %s, %.0f blocks repaired, requests lost %v (before, during, after), %d retried", agreed, fr.repaired, fr.lost, fr.retried)
	}
	s += fmt.Sprintf(", %d servers differ at the end; %d/%d answered", fr.differing, fr.run.answered, fr.run.want)
	if len(fr.run.problems) > 0 {
		s += fmt.Sprintf("; PROBLEMS: %v", fr.run.problems)
	}
	return s
}

// Issue 48's target for the faults: every pair agrees within this after the heal.
const targetAgreed = 2 * time.Second

// faultTable is the fault runs and their targets: per run, then per fault over
// the seeds (the hit rate's ratio paired by seed, with its interval).
func (b *bench) faultTable() string {
	if len(b.faultResults) == 0 {
		return ""
	}
	spec, _ := faultSpec(faultFreeze, b.o.sim.speedup)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**Through faults** (multi-turn, fits, at %d× its rate: %s, the sessions arriving until %v after the fault ends; by the fault, every server's cache and every index is full). At %v of simulated time, the second replica is faulted under traffic: frozen (SIGSTOP) for 2 s or 15 s of wall time, past the TTL and the readiness window, then SIGCONT; its peer-sync connections reset by the kernel (`ss -K`); killed (SIGKILL) and started again as its container would be (the same pod name and address, listed not ready meanwhile), behind a gateway that retries on another replica a request whose replica failed before it picked; listed not ready for %v (out of the peer set and of the gateway) and ready again (a flap); or, for the whole run, its clock %v ahead (clock skew). Agreed: from the fault's end until every pair of replicas had completed an anti-entropy exchange that found them holding the same (per-server digests equal but for what changed in the last 100 ms on either side; target ≤ %v). Differ: once the traffic is over, the servers whose digests differ between two replicas (target 0). Repaired: the blocks the replicas took from anti-entropy exchanges over the run (for a killed replica, those its new process took). Hit rate: the requests sent in the %v (simulated) after the fault ended, against the same window of the same seed with no fault (other text), and their ratio (target ≥ %.2f, paired by seed, with its 95%% interval in the summary), with the window's requests. A freeze's baseline has the gateway hold the requests it sends to that replica for as long as the freeze lasted, the replica running and its index in step: a frozen replica's requests wait and their sessions fall behind, which crowds the window after it whatever the index does; the held baseline measures what the freeze costs the index alone. Lost: requests that failed, by phase (before the fault, during it, after).\n\n",
		faultRate, describe(spec), faultWindow+10*time.Second, faultAt, flapFor, skewBy, targetAgreed, faultWindow, targetHitRatio)
	sb.WriteString("| configuration | replicas | fault | seed | agreed after | blocks repaired | servers differ | requests lost (before, during, after); retried | hit rate after (baseline); requests | ratio | errors |\n")
	sb.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ratios := map[string][]float64{}
	agreedMet := map[string]bool{}
	for _, fr := range b.faultResults {
		if fr.baseline {
			continue
		}
		base := b.baselineOf(fr)
		agreed := fmt.Sprintf("**not within %v**", agreeWithin)
		if fr.agreed >= 0 {
			agreed = fmt.Sprintf("%s: %s", millis(float64(fr.agreed)), verdict(fr.agreed <= targetAgreed))
		}
		if _, ok := agreedMet[fr.fault]; !ok {
			agreedMet[fr.fault] = true
		}
		agreedMet[fr.fault] = agreedMet[fr.fault] && fr.agreed >= 0 && fr.agreed <= targetAgreed && fr.differing == 0
		hit, rat := fmt.Sprintf("%.3f", fr.window.hitRate()), "–"
		if base != nil && base.window.requests > 0 && base.window.hitRate() > 0 {
			hit += fmt.Sprintf(" (%.3f); %d (%d)", base.window.hitRate(), fr.window.requests, base.window.requests)
			r := fr.window.hitRate() / base.window.hitRate()
			rat = fmt.Sprintf("%.3f", r)
			ratios[fr.fault] = append(ratios[fr.fault], r)
		}
		errs := fr.run.errors + len(fr.run.problems)
		if fr.fault == faultKill {
			errs = len(fr.run.problems)
		}
		cells := []string{fr.title, fmt.Sprint(fr.replicas), fr.fault, fmt.Sprint(fr.seed), agreed, fmt.Sprintf("%.0f", fr.repaired),
			fmt.Sprintf("%d: %s", fr.differing, verdict(fr.differing == 0)), fmt.Sprintf("%d, %d, %d; %d", fr.lost[0], fr.lost[1], fr.lost[2], fr.retried),
			hit, rat, fmt.Sprint(errs)}
		sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	sb.WriteString("\n| fault | seeds | every pair agreed within 2 s, none differing at the end | hit rate after, paired ratio to the baseline |\n|---|---:|---|---:|\n")
	for _, kind := range b.o.faultKinds {
		rs := ratios[kind]
		if len(rs) == 0 {
			continue
		}
		iv := meanInterval(rs)
		fmt.Fprintf(&sb, "| %s | %d | %s | %s: %s |\n", kind, len(rs), verdict(agreedMet[kind]), iv.format(3), iv.shown(targetHitRatio))
	}
	return sb.String()
}

// baselineOf is fr's baseline run.
func (b *bench) baselineOf(fr faultResult) *faultResult {
	for i := range b.faultResults {
		o := &b.faultResults[i]
		if o.baseline && o.config == fr.config && o.fault == fr.fault && o.seed == fr.seed && o.replicas == fr.replicas {
			return o
		}
	}
	return nil
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
