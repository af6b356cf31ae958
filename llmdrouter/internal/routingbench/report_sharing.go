package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/routingbench/workload"
)

// Issue 31's targets for the shared prefix index.
const (
	targetHitRatio    = 0.97                  // of one replica's hit rate, at every replica count
	targetPrecision   = 0.95                  // follow-up routing precision
	targetPropagation = 50 * time.Millisecond // p99, from a decision to a peer's index
)

// group is the results of one configuration and replica count, every workload.
func (b *bench) group(config string, n int) []result {
	var out []result
	for _, r := range b.results {
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
	sb.WriteString("\n**What the replicas use and send**, per configuration over all of its runs above (every workload, size and seed). CPU per replica: idle (measured before the runs), and over the runs (the replicas' CPU time over the runs' wall time). Sent: `epp_peer_sync_sent_bytes_total` (state and placements), per replica and second of the runs, and all replicas' bytes per request routed. Placements: `epp_shared_prefix_placement_bytes`, its mean and the placements published per request routed. Propagation: `epp_shared_prefix_propagation_seconds`, from a routing decision to its placement in a peer's index, every replica's histogram merged, p50 and p99 estimated as Prometheus's `histogram_quantile` does (linear within the bucket; the bucket's bound in brackets). Memory: resident (`VmRSS`) at the end of the configuration's runs, the median over its replicas, and in brackets the most any replica held (`VmHWM`). Index: the shared index's blocks per replica then (median).\n\n")
	sb.WriteString("| configuration | replicas | CPU per replica, idle | CPU per replica, runs | sent per replica | sent per request | bytes per placement | placements per request | propagation p50 | propagation p99 | memory per replica | index blocks per replica |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
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
				row = append(row, fmt.Sprintf("%.0f B", m.placementBytes.mean()), fmt.Sprintf("%.2f", m.placementBytes.count/float64(max(1, answered))),
					quantileString(m.propagation, 0.5), quantileString(m.propagation, 0.99))
			} else {
				row = append(row, "–", "–", "–", "–")
			}
			mem, blocks := "–", "–"
			if f := b.footprint(c.name, n); f != nil && len(f.rss) > 0 {
				mem = fmt.Sprintf("%s (%s)", mib(median(f.rss)), mib(slices.Max(f.peak)))
				if len(f.blocks) > 0 {
					blocks = fmt.Sprintf("%.0f", median(f.blocks))
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

// targets states, for the shared index, each of issue 31's targets, per workload,
// size and replica count: met or missed. Beside one replica's hit rate (the
// target's reference) it gives one replica's with the shared index's profile
// (single-active), when the run has it.
func (b *bench) targets() string {
	var rows []string
	var hits, hitsMet, precs, precsMet, props, propsMet int
	for _, kind := range b.o.kinds {
		for _, size := range b.o.sizes {
			of := func(config string, n int) []result {
				var out []result
				for _, r := range b.group(config, n) {
					if r.kind == kind && r.size == size {
						out = append(out, r)
					}
				}
				return out
			}
			hitOf := func(rs []result) stat { return statOf(rs, func(r result) float64 { return r.hitRate() }) }
			one, oneActive := of("single", 1), of("single-active", 1)
			for _, n := range b.o.replicas {
				rs := of("shared-index", n)
				if len(rs) == 0 {
					continue
				}
				hit := hitOf(rs)
				row := []string{fmt.Sprintf("%s, %s", kind, size), fmt.Sprint(n), hit.format(fixed(3))}
				if len(one) > 0 {
					ratio := hit.med / hitOf(one).med
					hits++
					if ratio >= targetHitRatio {
						hitsMet++
					}
					row = append(row, fixed(3)(hitOf(one).med), fmt.Sprintf("%.3f: %s", ratio, verdict(ratio >= targetHitRatio)))
				} else {
					row = append(row, "–", "–")
				}
				if len(oneActive) > 0 {
					row = append(row, fixed(3)(hitOf(oneActive).med), fmt.Sprintf("%.3f", hit.med/hitOf(oneActive).med))
				} else {
					row = append(row, "–", "–")
				}
				prec := statOf(rs, func(r result) float64 { return r.precision() })
				precs++
				if prec.med >= targetPrecision {
					precsMet++
				}
				row = append(row, fmt.Sprintf("%s: %s", prec.format(fixed(2)), verdict(prec.med >= targetPrecision)))
				m, _, _, _ := sharing(rs)
				p99, _ := m.propagation.quantile(0.99)
				propMet := !math.IsNaN(p99) && p99 <= targetPropagation.Seconds()
				props++
				if propMet {
					propsMet++
				}
				var route []time.Duration
				for _, r := range rs {
					route = append(route, r.route...)
				}
				slices.Sort(route)
				row = append(row, fmt.Sprintf("%s: %s", quantileString(m.propagation, 0.99), verdict(propMet)),
					millis(float64(percentile(route, 0.99))))
				rows = append(rows, "| "+strings.Join(row, " | ")+" |")
			}
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**Issue 31's targets for the shared prefix index**: a cache hit rate at least %.2f of one replica's at every replica count, a routing precision at least %.2f, and a propagation p99 of at most %v (medians over the seeds; ratios of the medians; the propagation of every run of the row). Met: the hit rate in %d of %d cases, the precision in %d of %d, the propagation in %d of %d. Beside them, one replica with the shared index's profile (`active-request-scorer` included: the control `single-active`) and the ratio to it, and the p99 of the time the EPP took to pick a server in the same runs (the ext_proc exchange until its answer): a sign of how long the machine kept the replicas waiting for a core.\n\n",
		targetHitRatio, targetPrecision, targetPropagation, hitsMet, hits, precsMet, precs, propsMet, props)
	sb.WriteString("| workload, size | replicas | hit rate, shared index | one replica | ratio (target ≥ 0.97) | one replica + active-request-scorer | ratio to it | routing precision (target ≥ 0.95) | propagation p99 (target ≤ 50 ms) | picking p99 |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	sb.WriteString(strings.Join(rows, "\n") + "\n")
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
	fmt.Fprintf(&sb, "\n**Through a rolling restart** (multi-turn, fits, longer: %s). From %v of simulated time on, the replicas are replaced one at a time as a Deployment's rolling update replaces pods with its default strategy (maxSurge and maxUnavailable 25%%: with 3 replicas, one more and none fewer): a new replica starts (a new pod name and address), listed not ready in the EPP Service's EndpointSlices; once its gRPC readiness passes it is listed ready and the gateway sends it requests; then an old replica is listed terminating, gets no new request, gets SIGTERM once the requests it routes have ended, and leaves the slices; the next new one starts at once. Hit rate and routing precision of the requests sent before the first replacement (from %v), during the replacements (until the last old replica is listed terminating) and after (until the last session's arrival); simulated times in brackets. The baseline runs the same workload (other text) through the same replicas with no restart, split at the restart's times: what the phases' figures owe to the run's own course (the caches and indexes filling up) rather than to the restart. Warm: the new replica's shared index arrived whole from a peer (`epp_peer_sync_broadcast_warm`, seen by polling its metrics every 20 ms), and when, after it was listed ready; requests it routed before.\n\n",
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
	return sb.String()
}
