package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/loadgen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
)

// result is one run: a configuration and replica count, a workload, size and seed.
type result struct {
	config, title string
	replicas      int
	kind          workload.Kind
	size          string
	seed          uint64
	ref           reference

	// From the generator's records.
	want       int // requests of the workload
	sent       int // requests recorded
	answered   int // answered with no error
	errors     int
	wrongText  int // answers that were not the simulator's for their prompt
	unrouted   int // routed to no known server
	reuse      int // requests after the first that could reuse an earlier prompt's blocks
	precise    int // ... sent to a server that still held them
	followUps  int // turns after a conversation's first
	sameServer int // ... sent to the server of the turn before
	genPrompt  int64
	srvPrompt  int64 // usage.prompt_tokens, summed
	srvCached  int64 // usage.prompt_tokens_details.cached_tokens, summed
	ttft       []time.Duration
	route      []time.Duration
	errorText  string // the first error

	// From the servers and the replicas.
	server    modelsim.Stats // counters over the run
	imbalance float64
	// usage is the servers' mean KV cache usage over the run, and waiting the
	// share of it in which some server held a request waiting (modelsim.Balance).
	usage, waiting float64
	// herding: see herding (the section under load only).
	herding float64
	cpu     time.Duration // every replica's CPU time over the run
	idleCPU float64       // the replicas' CPU time per second with no request
	wall    time.Duration
	// sync is what the replicas sent to their peers and merged from them over the
	// run (every replica's metrics together).
	sync replicaMetrics

	// problems are accounting mismatches (check).
	problems []string
}

// summarize reads a run's records; blockTokens is the servers' block size.
func summarize(records []loadgen.Record, convs []workload.Conversation, blockTokens int) result {
	r := result{want: workload.Requests(convs), sent: len(records)}
	slices.SortFunc(records, func(a, b loadgen.Record) int {
		if a.Conv != b.Conv {
			return a.Conv - b.Conv
		}
		return a.Turn - b.Turn
	})
	prevServer := map[int]int{}
	for _, rec := range records {
		r.genPrompt += int64(rec.PromptTokens)
		if rec.Err != "" {
			r.errors++
			if r.errorText == "" {
				r.errorText = rec.Err
			}
			continue
		}
		r.answered++
		if !rec.AnswerOK {
			r.wrongText++
		}
		if rec.Server < 0 {
			r.unrouted++
		}
		r.srvPrompt += int64(rec.ServerPromptTokens)
		r.srvCached += int64(rec.CachedTokens)
		r.ttft = append(r.ttft, rec.TTFT)
		r.route = append(r.route, rec.Route)
		if reuse, precise := reuses(rec, blockTokens); reuse {
			r.reuse++
			if precise {
				r.precise++
			}
		}
		if rec.Turn > 0 {
			r.followUps++
			if prev, ok := prevServer[rec.Conv]; ok && prev == rec.Server {
				r.sameServer++
			}
		}
		prevServer[rec.Conv] = rec.Server
	}
	slices.Sort(r.ttft)
	slices.Sort(r.route)
	return r
}

// reuses says whether rec could reuse whole blocks of an earlier prompt (a
// conversation's previous turn; a shared prefix after its group's first request),
// and whether its server still held them all (its cached tokens).
func reuses(rec loadgen.Record, blockTokens int) (reuse, precise bool) {
	full := rec.ReuseTokens / blockTokens * blockTokens
	return full > 0, full > 0 && rec.CachedTokens >= full
}

// check records every way the run's accounting does not add up: every request
// of the workload routed and answered with the simulator's answer, and the
// servers' token counts equal to the generator's and to the answers' usage.
func (r *result) check() {
	add := func(f string, a ...any) { r.problems = append(r.problems, fmt.Sprintf(f, a...)) }
	if r.sent != r.want || r.answered != r.want {
		add("%d of %d requests sent, %d answered (first error: %s)", r.sent, r.want, r.answered, r.errorText)
	}
	if r.unrouted > 0 {
		add("%d requests routed to no model server of the run", r.unrouted)
	}
	if r.wrongText > 0 {
		add("%d answers were not the simulator's for their prompt", r.wrongText)
	}
	if r.errors == 0 && r.genPrompt != r.srvPrompt {
		add("the generator sent %d prompt tokens, the answers' usage counts %d", r.genPrompt, r.srvPrompt)
	}
	if r.server.Requests != int64(r.answered) || r.server.PromptTokens != r.srvPrompt || r.server.CachedTokens != r.srvCached {
		add("the servers counted %d requests, %d prompt and %d cached tokens; the answers say %d, %d and %d",
			r.server.Requests, r.server.PromptTokens, r.server.CachedTokens, r.answered, r.srvPrompt, r.srvCached)
	}
	if r.server.Aborted > 0 {
		add("%d requests aborted at the servers", r.server.Aborted)
	}
}

// checkSharing records, for replicas that share the prefix index, a placement
// published during the run that was not merged by each of the n-1 peers (live, or
// resent after a gap), and a placement dropped for any reason: the runs remove no
// server, so none is dropped for its endpoint's leaving the pool either.
func (r *result) checkSharing(n int) {
	published := r.sync.placementBytes.count
	if reached := r.sync.reached(); reached != float64(n-1)*published {
		r.problems = append(r.problems, fmt.Sprintf("%.0f placements published, %.0f merged by the peers: want %d × %.0f",
			published, reached, n-1, published))
	}
	for reason, v := range r.sync.droppedBy {
		if v > 0 {
			r.problems = append(r.problems, fmt.Sprintf("%.0f placements dropped (%s)", v, reason))
		}
	}
	if published == 0 && r.answered > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d requests answered and no placement published", r.answered))
	}
}

// hitRate is the servers' cached over prompt tokens.
func (r result) hitRate() float64 {
	if r.server.PromptTokens == 0 {
		return 0
	}
	return float64(r.server.CachedTokens) / float64(r.server.PromptTokens)
}

// precision is the share of requests that could reuse an earlier prompt (a
// conversation's previous turn; a shared prefix after its group's first request)
// sent to a server that still held it.
func (r result) precision() float64 { return ratio(r.precise, r.reuse) }

// sameServerShare is the share of follow-up turns sent to the previous turn's server.
func (r result) sameServerShare() float64 { return ratio(r.sameServer, r.followUps) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// reqPerSec is the answered requests per wall-clock second of the run.
func (r result) reqPerSec() float64 { return float64(r.answered) / r.wall.Seconds() }

func (r result) summary() string {
	s := fmt.Sprintf("hit %.3f (blind %.3f, ceiling %.3f), precision %.2f, same server %.2f, imbalance %.2f, TTFT p50 %v p99 %v, %d/%d answered, %.0f req/s, route p50 %v p99 %v, %d late steps of %d",
		r.hitRate(), r.ref.blind, r.ref.ceiling, r.precision(), r.sameServerShare(), r.imbalance,
		stats.Percentile(r.ttft, 0.5).Round(time.Millisecond), stats.Percentile(r.ttft, 0.99).Round(time.Millisecond),
		r.answered, r.want, r.reqPerSec(),
		stats.Percentile(r.route, 0.5).Round(100*time.Microsecond), stats.Percentile(r.route, 0.99).Round(100*time.Microsecond), r.server.Late, r.server.Steps)
	if r.sync.placementBytes.count > 0 {
		s += fmt.Sprintf(", %.0f placements of %.0f bytes on average, propagation p50 %s p99 %s",
			r.sync.placementBytes.count, r.sync.placementBytes.mean(), quantileString(r.sync.propagation, 0.5), quantileString(r.sync.propagation, 0.99))
	}
	if len(r.problems) > 0 {
		s += fmt.Sprintf("; PROBLEMS: %v", r.problems)
	}
	return s
}
