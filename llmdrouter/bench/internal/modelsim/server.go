package modelsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Server is one simulated model server: a KV cache and a continuous-batching
// engine on a shared Clock. Submit runs a request to its end; Run is the engine.
type Server struct {
	cfg   Config
	clock *Clock

	mu      sync.Mutex
	cache   *Cache
	waiting []*request // in arrival order
	running []*request // in admission order
	stats   Stats
	engine  *engineMetrics // the page's histograms and extra counters
	wake    chan struct{}
	scrapes atomic.Int64
}

// Stats are a server's counters since it started (vLLM's counters of the same
// names in WriteMetrics).
type Stats struct {
	// Requests is how many requests finished (their answer complete).
	Requests int64 `json:"requests"`
	// Aborted is how many were dropped because their client went away.
	Aborted int64 `json:"aborted"`
	// PromptTokens and CachedTokens are the finished requests' prompt tokens and
	// the part of them found in the cache (prefix-cache queries and hits, in tokens).
	PromptTokens int64 `json:"promptTokens"`
	CachedTokens int64 `json:"cachedTokens"`
	// OutputTokens is the finished requests' answer tokens.
	OutputTokens int64 `json:"outputTokens"`
	// Steps and Late count engine steps, and those that began more than a step's
	// base cost behind their planned start (the machine could not keep up with
	// the clock's speed-up).
	Steps int64 `json:"steps"`
	Late  int64 `json:"late"`
}

// State is what a server runs and holds now.
type State struct {
	Running int     `json:"running"`
	Waiting int     `json:"waiting"`
	Usage   float64 `json:"kvCacheUsage"`
	Cached  int     `json:"cachedBlocks"`
}

// Result is what a finished request reports; times are simulated.
type Result struct {
	PromptTokens int
	CachedTokens int
	OutputTokens int
	// Text is the answer (for chat, the assistant message's content).
	Text string
	// Arrival, Admitted, FirstToken and Finished are when the request arrived,
	// began running, had its first token and its last.
	Arrival, Admitted, FirstToken, Finished time.Duration
}

// TTFT is the time from the request's arrival to its first token.
func (r Result) TTFT() time.Duration { return r.FirstToken - r.Arrival }

type request struct {
	tokens  Tokens
	arrival time.Duration

	alloc     *Allocation
	hit       int // blocks
	toPrefill int // tokens
	chunk     int // tokens prefilled in the current step
	prefilled bool
	generated int
	lastToken time.Duration // when its last token came
	aborted   bool
	result    Result
	done      chan struct{}
}

// NewServer is a server on clock; cfg must be valid.
func NewServer(cfg Config, clock *Clock) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, clock: clock, cache: NewCache(cfg.CapacityBlocks), engine: newEngineMetrics(cfg.ContextTokens()), wake: make(chan struct{}, 1)}, nil
}

// Config is the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// ErrTooLong is Submit's error for a request whose prompt and answer do not fit
// the KV cache (vLLM refuses a request longer than its context).
var ErrTooLong = errors.New("modelsim: request longer than the KV cache")

// ErrStopped is Submit's error when the server stopped before the request ended.
var ErrStopped = errors.New("modelsim: server stopped")

// Submit runs req on the server and waits for its answer, or for ctx to end (the
// request is then dropped: an abort), or for the engine to stop.
func (s *Server) Submit(ctx context.Context, req Request, stopped <-chan struct{}) (Result, error) {
	tok := Tokenize(req, s.cfg.BlockTokens)
	r := &request{tokens: tok, done: make(chan struct{})}
	if n := tok.Blocks(); n > s.cfg.CapacityBlocks {
		return Result{}, fmt.Errorf("%w: %d prompt and %d answer tokens take %d blocks, the KV cache has %d", ErrTooLong, tok.Prompt, tok.Output, n, s.cfg.CapacityBlocks)
	}
	s.mu.Lock()
	r.arrival = s.clock.Now()
	s.waiting = append(s.waiting, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.result, nil
	case <-ctx.Done():
		s.mu.Lock()
		r.aborted = true
		s.mu.Unlock()
		return Result{}, ctx.Err()
	case <-stopped:
		return Result{}, ErrStopped
	}
}

// Run is the engine: a step after another while requests run, until ctx ends.
func (s *Server) Run(ctx context.Context) {
	var t time.Duration // when the next step starts
	for {
		s.mu.Lock()
		s.admit(t)
		if len(s.running) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
			t = max(t, s.clock.Now())
			continue
		}
		dur := s.plan()
		s.stats.Steps++
		if now := s.clock.Now(); now > t+s.cfg.StepBase {
			s.stats.Late++
			if now > t+time.Second { // far behind (a stopped process): do not replay
				t = now
			}
		}
		s.mu.Unlock()
		end := t + dur
		if !s.clock.SleepUntil(ctx, end) {
			return
		}
		s.mu.Lock()
		s.apply(end)
		s.mu.Unlock()
		t = end
	}
}

// admit moves waiting requests that arrived by t into the running ones, in arrival
// order, while there is a running slot and cache room (the first that does not fit
// waits, and those after it too).
func (s *Server) admit(t time.Duration) {
	s.waiting = slices.DeleteFunc(s.waiting, func(r *request) bool {
		if r.aborted {
			s.stats.Aborted++
		}
		return r.aborted
	})
	n := 0
	for _, r := range s.waiting {
		if len(s.running) >= s.cfg.MaxRunning || r.arrival > t {
			break
		}
		a, hit, ok := s.cache.Allocate(r.tokens.PromptBlocks, r.tokens.MaxHit(), r.tokens.Blocks())
		if !ok {
			break
		}
		r.alloc, r.hit = a, hit
		r.toPrefill = r.tokens.Prompt - hit*s.cfg.BlockTokens
		r.result.Arrival, r.result.Admitted = r.arrival, t
		s.running = append(s.running, r)
		n++
	}
	s.waiting = s.waiting[n:]
}

// plan chooses what the next step computes and returns its cost: one token of
// every decoding request, then prompt tokens of the others in admission order
// within the step's token budget.
func (s *Server) plan() time.Duration {
	decoding := 0
	for _, r := range s.running {
		if r.prefilled {
			decoding++
		}
	}
	budget := s.cfg.MaxBatchedTokens - decoding
	prefill := 0
	for _, r := range s.running {
		if !r.prefilled && budget > 0 {
			r.chunk = min(r.toPrefill, budget)
			budget -= r.chunk
			prefill += r.chunk
		}
	}
	return s.cfg.StepBase + time.Duration(decoding)*s.cfg.StepPerSequence + time.Duration(prefill)*s.cfg.PrefillPerToken
}

// apply ends the step at end: decoding requests have one token more, prefills
// progress (a completed one caches its prompt's blocks and has its first token),
// and finished or aborted requests leave.
func (s *Server) apply(end time.Duration) {
	computed := 0
	s.running = slices.DeleteFunc(s.running, func(r *request) bool {
		switch {
		case r.aborted:
			s.cache.Free(r.alloc)
			s.stats.Aborted++
			return true
		case r.prefilled:
			r.generated++
			computed++
			s.engine.token(end - r.lastToken)
			r.lastToken = end
		case r.chunk > 0:
			computed += r.chunk
			r.toPrefill -= r.chunk
			r.chunk = 0
			if r.toPrefill == 0 {
				r.prefilled = true
				r.generated = 1
				r.result.FirstToken, r.lastToken = end, end
				s.engine.firstToken(end - r.arrival)
				s.cache.Commit(r.alloc, r.tokens.PromptBlocks[r.hit:])
			}
		}
		if !r.prefilled || r.generated < r.tokens.Output {
			return false
		}
		s.finish(r, end)
		return true
	})
	if computed > 0 {
		s.engine.step(computed)
	}
}

// finish caches the answer's full blocks, frees the request's blocks and answers.
func (s *Server) finish(r *request, end time.Duration) {
	t := r.tokens
	s.cache.Commit(r.alloc, t.SequenceBlocks[len(t.PromptBlocks):])
	s.cache.Free(r.alloc)
	cached := r.hit * s.cfg.BlockTokens
	s.stats.Requests++
	s.stats.PromptTokens += int64(t.Prompt)
	s.stats.CachedTokens += int64(cached)
	s.stats.OutputTokens += int64(t.Output)
	r.result.PromptTokens, r.result.CachedTokens, r.result.OutputTokens = t.Prompt, cached, t.Output
	r.result.Text = string(t.Answer)
	r.result.Finished = end
	s.engine.finished(r.result)
	close(r.done)
}

// Stats are the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ErrBusy is Reset's error while the server runs or holds requests.
var ErrBusy = errors.New("modelsim: the server has requests")

// Reset empties the KV cache of an idle server.
func (s *Server) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.running)+len(s.waiting) > 0 {
		return ErrBusy
	}
	s.cache.Reset()
	return nil
}

// Scrapes is how many times /metrics was read.
func (s *Server) Scrapes() int64 { return s.scrapes.Load() }

// State is what the server runs and holds now.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state()
}

func (s *Server) state() State {
	return State{Running: len(s.running), Waiting: len(s.waiting), Usage: s.cache.Usage(), Cached: s.cache.Cached()}
}
