package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
)

// Issue 31's targets for the shared prefix index.
const (
	targetHitRatio    = 0.97                  // of one replica's hit rate, at every replica count
	targetPrecision   = 0.95                  // follow-up routing precision
	targetPropagation = 50 * time.Millisecond // p99, from a decision to a peer's index
)

// group is the results of one configuration and replica count, every workload.
func (b *bench) group(config string, n int) []result { return runsOf(b.results, config, n) }

// runsOf are the runs of rs of config with n replicas.
func runsOf(rs []result, config string, n int) []result {
	var out []result
	for _, r := range rs {
		if r.config == config && r.replicas == n {
			out = append(out, r)
		}
	}
	return out
}

// sharing is the sync figures of rs together.
func sharing(rs []result) (m replicaMetrics, wall time.Duration, cpu time.Duration, answered int) {
	for _, r := range rs {
		m = m.add(r.sync)
		wall += r.wall
		cpu += r.cpu
		answered += r.answered
	}
	return m, wall, cpu, answered
}

func (b *bench) footprint(config string, n int) *footprint {
	for i := range b.footprints {
		if b.footprints[i].config == config && b.footprints[i].replicas == n {
			return &b.footprints[i]
		}
	}
	return nil
}

func bytesString(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 10<<10:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

// seconds is a duration in seconds as milliseconds (below 10 s), or "–" for NaN.
func seconds(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	if v < 0.01 {
		return fmt.Sprintf("%.1f ms", 1000*v)
	}
	return millis(v * float64(time.Second))
}

// quantileString is h's q-quantile and the upper bound of its bucket.
func quantileString(h histogram, q float64) string {
	est, bucket := h.quantile(q)
	if math.IsNaN(est) {
		return "–"
	}
	if math.IsInf(bucket, 1) {
		return fmt.Sprintf("> %s", seconds(est))
	}
	return fmt.Sprintf("%s (≤ %s)", seconds(est), seconds(bucket))
}

// costTable is, per configuration and replica count, what each replica uses and
// sends over every run of the configuration.
func (b *bench) costTable() string {
	var sb strings.Builder
	sb.WriteString("\n**What the replicas use and send**, per configuration over all of its runs above (every workload, size and seed). CPU per replica: idle (measured before the runs), and over the runs (the replicas' CPU time over the runs' wall time). Sent: `epp_peer_sync_sent_bytes_total` (state and placements), per replica and second of the runs, and all replicas' bytes per request routed. Placements: `epp_shared_prefix_placement_bytes`, its mean and the placements published per request routed; merged: the peers' placements merged (live, or resent after a gap) of those due (each placement by every other replica), with those dropped by reason (any is an error of the run). Propagation: `epp_shared_prefix_propagation_seconds`, from a routing decision to its placement in a peer's index, every replica's histogram merged, p50 and p99 estimated as Prometheus's `histogram_quantile` does (linear within the bucket; the bucket's bound in brackets). Memory: resident (`VmRSS`) at the end of the configuration's runs, the median over its replicas, and in brackets the most any replica held (`VmHWM`). Index: the shared index's blocks per replica then (median).\n\n")
	sb.WriteString("| configuration | replicas | CPU per replica, idle | CPU per replica, runs | sent per replica | sent per request | bytes per placement | placements per request | merged by the peers | propagation p50 | propagation p99 | memory per replica | index blocks per replica |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range b.o.configs {
		counts := b.o.replicas
		if c.single {
			counts = []int{1}
		}
		for _, n := range counts {
			rs := b.group(c.name, n)
			if len(rs) == 0 {
				continue
			}
			m, wall, cpu, answered := sharing(rs)
			row := []string{c.title, fmt.Sprint(n),
				fmt.Sprintf("%.1f%%", 100*rs[0].idleCPU/float64(n)),
				fmt.Sprintf("%.1f%%", 100*cpu.Seconds()/wall.Seconds()/float64(n))}
			if c.syncs {
				row = append(row, bytesString(m.sentBytes/wall.Seconds()/float64(n))+"/s", bytesString(m.sentBytes/float64(max(1, answered))))
			} else {
				row = append(row, "–", "–")
			}
			if c.sharesIndex {
				merged := fmt.Sprintf("%.0f of %.0f", m.reached(), float64(n-1)*m.placementBytes.count)
				var drops []string
				for _, reason := range slices.Sorted(maps.Keys(m.droppedBy)) {
					if v := m.droppedBy[reason]; v > 0 {
						drops = append(drops, fmt.Sprintf("%.0f %s", v, reason))
					}
				}
				if len(drops) > 0 {
					merged += fmt.Sprintf(" (**dropped: %s**)", strings.Join(drops, ", "))
				}
				row = append(row, fmt.Sprintf("%.0f B", m.placementBytes.mean()), fmt.Sprintf("%.2f", m.placementBytes.count/float64(max(1, answered))),
					merged, quantileString(m.propagation, 0.5), quantileString(m.propagation, 0.99))
			} else {
				row = append(row, "–", "–", "–", "–", "–")
			}
			mem, blocks := "–", "–"
			if f := b.footprint(c.name, n); f != nil && len(f.rss) > 0 {
				mem = fmt.Sprintf("%s (%s)", mib(stats.Median(f.rss)), mib(slices.Max(f.peak)))
				if len(f.blocks) > 0 {
					blocks = fmt.Sprintf("%.0f", stats.Median(f.blocks))
				}
			}
			row = append(row, mem, blocks)
			sb.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	return sb.String()
}

// verdict is "met" or "missed".
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}

// of is configuration config's runs with n replicas on kind and size.
func (b *bench) of(config string, n int, kind workload.Kind, size string) []result {
	var out []result
	for _, r := range b.group(config, n) {
		if r.kind == kind && r.size == size {
			out = append(out, r)
		}
	}
	return out
}

func hitRate(r result) float64   { return r.hitRate() }
func precision(r result) float64 { return r.precision() }
func imbalance(r result) float64 { return r.imbalance }

// propagationMet decides the 50 ms target from the bucket the p99 falls in (the
// histogram has 5 ms buckets there): met when that bucket ends at 50 ms or below,
// missed when it starts above, whatever the interpolation inside it says.
func propagationMet(h histogram) (string, bool) {
	est, bucket := h.quantile(0.99)
	if math.IsNaN(est) {
		return "–", false
	}
	return fmt.Sprintf("%s: %s", quantileString(h, 0.99), verdict(bucket <= targetPropagation.Seconds())), bucket <= targetPropagation.Seconds()
}

// targets states the shared index's targets per workload, size and replica count,
// on both profiles, from paired ratios: each seed's hit rate over one replica's on
// the same seed, their mean and its 95% interval; a target is met only when the
// interval's lower end clears it. Beside them, the ratio to the one-replica
// controls: the shared index alone (single-shared: the index's implementation,
// not the sharing) and, for the state-sync profile, one replica with its scorer.
func (b *bench) targets() string {
	var rows []string
	shownN, cases := 0, 0
	for _, config := range []string{"shared-index-default", "shared-index"} {
		c, err := configurationNamed(config)
		if err != nil || !slices.ContainsFunc(b.o.configs, func(x configuration) bool { return x.name == config }) {
			continue
		}
		for _, kind := range b.o.kinds {
			for _, size := range b.o.sizes {
				one := b.of("single", 1, kind, size)
				for _, n := range b.o.replicas {
					rs := b.of(config, n, kind, size)
					if len(rs) == 0 {
						continue
					}
					ratio := pairedRatios(rs, one, hitRate)
					cases++
					if ratio.shown(targetHitRatio) == "met" {
						shownN++
					}
					row := []string{c.title, fmt.Sprintf("%s, %s", kind, size), fmt.Sprint(n), values(rs, hitRate).format(3), values(one, hitRate).format(3),
						fmt.Sprintf("%s: %s", ratio.format(3), ratio.shown(targetHitRatio))}
					control := "single-shared"
					if config == "shared-index" {
						control = "single-active"
					}
					row = append(row, fmt.Sprintf("%s (%s)", pairedRatios(rs, b.of(control, 1, kind, size), hitRate).format(3), control))
					prec := values(rs, precision)
					row = append(row, fmt.Sprintf("%s: %s", prec.format(2), prec.shown(targetPrecision)))
					m, _, _, _ := sharing(rs)
					prop, _ := propagationMet(m.propagation)
					var route []time.Duration
					for _, r := range rs {
						route = append(route, r.route...)
					}
					slices.Sort(route)
					row = append(row, prop, millis(float64(stats.Percentile(route, 0.99))))
					rows = append(rows, "| "+strings.Join(row, " | ")+" |")
				}
			}
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**The shared prefix index against one replica**, on upstream's default profile and on the state-sync profile (with `active-request-scorer`). Hit rate: the mean over the seeds with its 95%% interval. Ratio: each seed's hit rate over one replica's on the same seed (the same workload, its text aside), their mean and 95%% interval (Student's t); the target (at least %.2f of one replica) is met only when the interval's lower end clears it, missed when its upper end is below, and not shown otherwise: shown in %d of %d cases. Control: the paired ratio to one replica of the same kind, the shared index alone (`single-shared`: this index's implementation with nothing to share) for the default profile, one replica with the state-sync profile's scorer (`single-active`) for the other. Precision: the mean with its interval (target ≥ %.2f). Propagation: from a decision to a peer's index, every run's histogram merged; the 50 ms target is decided by the 5 ms bucket the p99 falls in. Picking: the p99 of the time the EPP took to pick a server in the same runs (the ext_proc exchange until its answer), a sign of how long the machine kept the replicas waiting for a core.\n\n",
		targetHitRatio, shownN, cases, targetPrecision)
	sb.WriteString("| configuration | workload, size | replicas | hit rate | one replica | ratio (target ≥ 0.97) | ratio to the control | routing precision (target ≥ 0.95) | propagation p99 (target ≤ 50 ms) | picking p99 |\n")
	sb.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	sb.WriteString(strings.Join(rows, "\n") + "\n")
	return sb.String()
}

// stateSyncTable compares the state-sync profile (active-request-scorer reading
// the in-flight load through peer-syncer) with one replica of that profile that
// reads it live (single-active): one replica through the syncer (single-peer)
// must match it, now that the syncer reads this replica's own load live; peer and
// shared-index at 3 and 8 show what remains of the gap.
func (b *bench) stateSyncTable() string {
	var rows []string
	for _, kind := range b.o.kinds {
		for _, size := range b.o.sizes {
			ref := b.of("single-active", 1, kind, size)
			if len(ref) == 0 {
				continue
			}
			add := func(config string, n int) {
				rs := b.of(config, n, kind, size)
				if len(rs) == 0 {
					return
				}
				c, _ := configurationNamed(config)
				hit, imb := pairedRatios(rs, ref, hitRate), pairedRatios(rs, ref, imbalance)
				rows = append(rows, fmt.Sprintf("| %s, %s | %s | %d | %s | %s | %s | %s |", kind, size, c.title, n,
					values(rs, hitRate).format(3), hit.format(3), values(rs, imbalance).format(2), imb.format(2)))
			}
			add("single-peer", 1)
			for _, n := range b.o.replicas {
				add("peer", n)
				add("shared-index", n)
			}
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\n**The state-sync profile against one replica of it** (`single-active`: `active-request-scorer` reading the in-flight load live, with no syncer). With `peer-syncer`, a replica reads its own in-flight load live too (the contributor's value at the read, not the one set at the last 200 ms interval), with its peers' values as of their last push. One replica through the syncer (`single-peer`) must match `single-active` within its interval; the replicated rows show what remains. Ratios are paired by seed, with their 95% interval.\n\n")
	sb.WriteString("| workload, size | configuration | replicas | hit rate | hit rate ratio to single-active | imbalance | imbalance ratio to single-active |\n")
	sb.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	sb.WriteString(strings.Join(rows, "\n") + "\n")
	return sb.String()
}

// headline is the paragraph the README and SHARING-STATE.md quote (between the
// routing-headline markers; make lint checks that they quote this one): the shared
// index on both profiles against one replica and against sharing nothing, on the
// multi-turn workload that fits, and in how many cases the 0.97 target is shown.
func (b *bench) headline() string {
	kind, size := workload.MultiTurn, sizeFits
	one := b.of("single", 1, kind, size)
	if len(one) == 0 {
		return ""
	}
	ratios := func(config string) string {
		var parts []string
		for _, n := range b.o.replicas {
			if rs := b.of(config, n, kind, size); len(rs) > 0 {
				iv := pairedRatios(rs, one, hitRate)
				part := fmt.Sprintf("%s at %d", iv.format(3), n)
				if iv.N != len(one) && iv.N > 1 { // the controls run fewer seeds: say so where it holds
					part += fmt.Sprintf(" (%d seeds)", iv.N)
				}
				parts = append(parts, part)
			}
		}
		return strings.Join(parts, " and ")
	}
	shown, cases := 0, 0
	for _, config := range []string{"shared-index-default", "shared-index"} {
		for _, k := range b.o.kinds {
			for _, z := range b.o.sizes {
				for _, n := range b.o.replicas {
					if rs := b.of(config, n, k, z); len(rs) > 0 {
						cases++
						if pairedRatios(rs, b.of("single", 1, k, z), hitRate).shown(targetHitRatio) == "met" {
							shown++
						}
					}
				}
			}
		}
	}
	seeds := fmt.Sprintf("%d seeds", len(one))
	if len(one) == 1 {
		seeds = "1 seed"
	}
	// Only what ran is claimed (the smoke runs neither shared-index-default nor 8
	// replicas).
	clauses := []string{fmt.Sprintf("one replica hits the prompt cache %s of the time", values(one, hitRate).format(3))}
	switch def, sync := ratios("shared-index-default"), ratios("shared-index"); {
	case def != "" && sync != "":
		clauses = append(clauses, fmt.Sprintf("replicas that share the prefix index hit it %s times as often as one replica does on upstream's default profile, and %s with state sync's profile (`active-request-scorer`)", def, sync))
	case def != "":
		clauses = append(clauses, fmt.Sprintf("replicas that share the prefix index hit it %s times as often as one replica does on upstream's default profile", def))
	case sync != "":
		clauses = append(clauses, fmt.Sprintf("replicas that share the prefix index hit it %s times as often as one replica does with state sync's profile (`active-request-scorer`)", sync))
	}
	if l := ratios("local"); l != "" {
		clauses = append(clauses, "replicas that share nothing (`LocalSyncer`), "+l)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "On the multi-turn workload that fits (%s), %s. Each ratio is paired by seed, with its 95%% interval; at least %.2f× is shown in %d of %d cases (both profiles, every workload and replica count).",
		seeds, strings.Join(clauses, "; "), targetHitRatio, shown, cases)
	if b.o.quick {
		sb.WriteString(" (A quick run: fewer seeds.)")
	}
	return sb.String()
}

// restartTable is the runs through a rolling restart.
func (b *bench) restartTable() string {
	if len(b.restarts) == 0 {
		return ""
	}
	spec, _ := preset(workload.MultiTurn, sizeFits, 1)
	spec.Count = int(math.Round(spec.Rate * restartArrivals.Seconds()))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**Through a rolling restart** (multi-turn, fits, longer: %s). From %v of simulated time on, the replicas are replaced one at a time as a Deployment's rolling update replaces pods with its default strategy (maxSurge and maxUnavailable 25%%: with 3 replicas, one more and none fewer): a new replica starts (a new pod name and address), listed not ready in the EPP Service's EndpointSlices; once its gRPC readiness passes it is listed ready and the gateway sends it requests; then an old replica is listed terminating, gets no new request, gets SIGTERM once the requests it routes have ended, and leaves the slices; the next new one starts at once. Hit rate and routing precision of the requests sent before the first replacement (from %v), during the replacements (until the last old replica is listed terminating) and after (until the last session's arrival); simulated times in brackets. The baseline runs the same workload (other text) through the same replicas with no restart, split at the restart's times: what the phases' figures owe to the run's own course (the caches and indexes filling up) rather than to the restart. Warm: the new replica completed an anti-entropy exchange with a peer, which fills an empty index (`epp_shared_prefix_warm`, seen by polling its metrics every 20 ms), and when, after it was listed ready; requests it routed before.\n\n",
		describe(spec), restartAt, restartWarmup)
	sb.WriteString("| configuration | replicas | seed | before | during | after | new replicas ready after | warm, after being listed ready | routed before warm | errors |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, rr := range b.restarts {
		title := rr.title
		if rr.baseline {
			title += ", no restart (baseline)"
		}
		cells := []string{title, fmt.Sprint(rr.replicas), fmt.Sprint(rr.seed)}
		for _, p := range rr.phases {
			if p.requests == 0 {
				cells = append(cells, fmt.Sprintf("– (%.0f–%.0f s)", p.from.Seconds(), p.to.Seconds()))
				continue
			}
			cells = append(cells, fmt.Sprintf("%.3f, %.2f (%.0f–%.0f s)", p.hitRate(), ratio(p.precise, p.reuse), p.from.Seconds(), p.to.Seconds()))
		}
		var readyLo, readyHi, warmLo, warmHi time.Duration
		warm, routed, cold, bootstraps := 0, 0, 0, false
		for i, rp := range rr.replaced {
			if i == 0 || rp.ready < readyLo {
				readyLo = rp.ready
			}
			readyHi = max(readyHi, rp.ready)
			bootstraps = bootstraps || rp.bootstraps
			routed += rp.routed
			if rp.warm {
				if warm == 0 || rp.warmAfterListed < warmLo {
					warmLo = rp.warmAfterListed
				}
				warmHi = max(warmHi, rp.warmAfterListed)
				warm++
			}
			cold += rp.routedCold
		}
		cells = append(cells, fmt.Sprintf("%s–%s", millis(float64(readyLo)), millis(float64(readyHi))))
		if rr.baseline {
			cells[len(cells)-1] = "–"
		}
		switch {
		case rr.baseline:
			cells = append(cells, "–", "–")
		case !bootstraps:
			cells = append(cells, "– (no index to pull)", "–")
		case warm == 0:
			cells = append(cells, fmt.Sprintf("**0 of %d** within %v", len(rr.replaced), warmWithin), fmt.Sprintf("%d of %d", cold, routed))
		default:
			cells = append(cells, fmt.Sprintf("%d of %d (%s–%s)", warm, len(rr.replaced), millis(float64(warmLo)), millis(float64(warmHi))), fmt.Sprintf("%d of %d", cold, routed))
		}
		cells = append(cells, fmt.Sprint(rr.run.errors+len(rr.run.problems)))
		sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	var lines []string
	for _, rr := range b.restarts {
		if len(rr.phases) == 3 && rr.phases[0].requests > 0 && rr.phases[1].requests > 0 {
			before, during := rr.phases[0].hitRate(), rr.phases[1].hitRate()
			title := rr.title
			if rr.baseline {
				title += " with no restart"
			}
			s := fmt.Sprintf("%s: %.3f during against %.3f before (%+.0f%%)", title, during, before, 100*(during/before-1))
			if after := rr.phases[2]; after.requests > 0 {
				s += fmt.Sprintf(", %.3f after", after.hitRate())
			}
			lines = append(lines, s)
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(&sb, "\nHit rate through the rolling restart: %s.\n", strings.Join(lines, "; "))
	}
	sb.WriteString(restartRatios(b.restarts))
	return sb.String()
}

// restartRatios is, per configuration run with baselines, each seed's hit rate
// during and after the rolling restart over its baseline's in the same phase
// (the same seed's workload with no restart): their means with 95% intervals,
// against the fault runs' target (at least 0.97 of the baseline).
func restartRatios(runs []restartResult) string {
	type ratios struct {
		title         string
		during, after []float64
	}
	var order []*ratios
	byConfig := map[string]*ratios{}
	for _, rr := range runs {
		if rr.baseline || len(rr.phases) != 3 {
			continue
		}
		i := slices.IndexFunc(runs, func(o restartResult) bool {
			return o.baseline && o.config == rr.config && o.seed == rr.seed && len(o.phases) == 3
		})
		if i < 0 {
			continue
		}
		r := byConfig[rr.config]
		if r == nil {
			r = &ratios{title: rr.title}
			byConfig[rr.config] = r
			order = append(order, r)
		}
		for k, into := range map[int]*[]float64{1: &r.during, 2: &r.after} {
			if p, q := rr.phases[k], runs[i].phases[k]; p.requests > 0 && q.requests > 0 && q.hitRate() > 0 {
				*into = append(*into, p.hitRate()/q.hitRate())
			}
		}
	}
	if len(order) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\nPaired with the baseline (each seed's hit rate in the phase over the same seed's with no restart; the mean with its 95% interval, against the target of at least 0.97):\n\n")
	sb.WriteString("| configuration | seeds | during ÷ baseline | after ÷ baseline |\n|---|---:|---:|---:|\n")
	for _, r := range order {
		during, after := meanInterval(r.during), meanInterval(r.after)
		fmt.Fprintf(&sb, "| %s | %d | %s: %s | %s: %s |\n", r.title, max(during.N, after.N), during.format(3), during.shown(targetHitRatio), after.format(3), after.shown(targetHitRatio))
	}
	return sb.String()
}
