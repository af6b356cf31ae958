package modelsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// startServer runs a server of cfg on a clock of speedup until the test ends.
func startServer(t *testing.T, cfg Config, speedup float64) *Server {
	t.Helper()
	s, err := NewServer(cfg, NewClock(speedup))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func submit(t *testing.T, s *Server, req Request) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.Submit(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func completion(prompt string, out int) Request {
	return Request{Model: "m", Prompt: &prompt, MaxTokens: &out}
}

func TestServerHitsTheCachedPrefixLeavingOneTokenToCompute(t *testing.T) {
	s := startServer(t, DefaultConfig(), 100)
	prompt := strings.Repeat("abcd", 4*64) // exactly 4 blocks
	if r := submit(t, s, completion(prompt, 8)); r.CachedTokens != 0 || r.PromptTokens != 256 || r.OutputTokens != 8 {
		t.Fatalf("first request: %+v, want 256 prompt tokens, none cached, 8 out", r)
	}
	// The same prompt again: every block is cached, but the last token must be
	// computed, so the last block is not a hit (as in vLLM).
	if r := submit(t, s, completion(prompt, 8)); r.CachedTokens != 3*64 {
		t.Errorf("repeated prompt: %d cached tokens, want 192", r.CachedTokens)
	}
	// One token more: the 4 blocks hit.
	if r := submit(t, s, completion(prompt+"efgh", 8)); r.CachedTokens != 4*64 {
		t.Errorf("extended prompt: %d cached tokens, want 256", r.CachedTokens)
	}
	// Another prompt of the same length shares nothing.
	if r := submit(t, s, completion(strings.Repeat("wxyz", 4*64), 8)); r.CachedTokens != 0 {
		t.Errorf("another prompt: %d cached tokens, want 0", r.CachedTokens)
	}
}

func TestServerCachesTheAnswerForTheNextTurn(t *testing.T) {
	s := startServer(t, DefaultConfig(), 100)
	out := 50
	turn1 := []Message{{Role: "system", Content: strings.Repeat("s", 298)}, {Role: "user", Content: strings.Repeat("q", 96)}} // 304+100 bytes: 101 tokens
	r1 := submit(t, s, Request{Model: "m", Messages: turn1, MaxTokens: &out})
	if r1.PromptTokens != 101 || r1.CachedTokens != 0 {
		t.Fatalf("turn 1: %+v", r1)
	}
	turn2 := append(slices.Clone(turn1), Message{Role: AssistantRole, Content: r1.Text}, Message{Role: "user", Content: strings.Repeat("r", 200)})
	r2 := submit(t, s, Request{Model: "m", Messages: turn2, MaxTokens: &out})
	// Turn 1's prompt and answer are 151 tokens: 2 full blocks of 64.
	if r2.PromptTokens != 101+50+51 || r2.CachedTokens != 128 {
		t.Errorf("turn 2: %d prompt tokens, %d cached; want 202 and 128 (turn 1's prompt and answer, in full blocks)", r2.PromptTokens, r2.CachedTokens)
	}
}

func TestServerRunsAtMostMaxRunning(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRunning = 2
	s := startServer(t, cfg, 50)
	var mu sync.Mutex
	var rs []Result
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			r := submit(t, s, completion(strings.Repeat(string(rune('a'+i)), 400), 20))
			mu.Lock()
			rs = append(rs, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	// At no simulated time did more than 2 run.
	for _, r := range rs {
		running := 0
		for _, o := range rs {
			if o.Admitted <= r.Admitted && r.Admitted < o.Finished {
				running++
			}
		}
		if running > 2 {
			t.Errorf("%d requests ran at %v, max 2", running, r.Admitted)
		}
	}
}

func TestServerWaitsForCacheRoom(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 10
	s := startServer(t, cfg, 50)
	var wg sync.WaitGroup
	rs := make([]Result, 2)
	for i := range rs {
		wg.Go(func() { rs[i] = submit(t, s, completion(strings.Repeat(string(rune('a'+i)), 4*6*64), 64)) }) // 7 blocks each
	}
	wg.Wait()
	first, second := rs[0], rs[1]
	if second.Admitted < first.Admitted {
		first, second = second, first
	}
	if second.Admitted < first.Finished {
		t.Errorf("two requests of 7 blocks ran together in a cache of 10: admitted at %v, the first finished at %v", second.Admitted, first.Finished)
	}
	if _, err := s.Submit(context.Background(), completion(strings.Repeat("x", 4*11*64), 1), nil); !errors.Is(err, ErrTooLong) {
		t.Errorf("a request of 12 blocks in a cache of 10: %v, want ErrTooLong", err)
	}
}

func TestServerTTFTIsQueueAndPrefillOfUncachedTokens(t *testing.T) {
	cfg := DefaultConfig()
	s := startServer(t, cfg, 10)
	prompt := strings.Repeat("abcd", 1024)
	cold := submit(t, s, completion(prompt+"!", 4))
	warm := submit(t, s, completion(prompt+"?", 4)) // 1024 tokens cached, 1 computed
	if min := cfg.StepBase + 1025*cfg.PrefillPerToken; cold.TTFT() < min {
		t.Errorf("TTFT of 1,025 uncached tokens %v, less than their prefill %v", cold.TTFT(), min)
	}
	if warm.CachedTokens != 1024 || warm.TTFT() >= cold.TTFT() {
		t.Errorf("cached prompt: %d cached tokens, TTFT %v; want 1024 and less than the uncached %v", warm.CachedTokens, warm.TTFT(), cold.TTFT())
	}
	if got, want := cold.Finished-cold.FirstToken, 3*cfg.StepBase; got < want {
		t.Errorf("3 decode steps took %v, less than 3 steps (%v)", got, want)
	}
}

// TestServerCountersMatchTheAnswers: concurrent requests of shared and distinct
// prefixes; the server's counters are the sums of what its answers reported.
func TestServerCountersMatchTheAnswers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 64
	s := startServer(t, cfg, 100)
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	var sum Stats
	var wg sync.WaitGroup
	for i := range 40 {
		prefix := strings.Repeat(string(rune('a'+rng.IntN(4))), 4*64*(1+rng.IntN(4)))
		prompt := prefix + strings.Repeat(string(rune('A'+i%26)), 1+rng.IntN(300))
		out := 1 + rng.IntN(80)
		wg.Go(func() {
			r := submit(t, s, completion(prompt, out))
			mu.Lock()
			defer mu.Unlock()
			sum.Requests++
			sum.PromptTokens += int64(r.PromptTokens)
			sum.CachedTokens += int64(r.CachedTokens)
			sum.OutputTokens += int64(r.OutputTokens)
		})
	}
	wg.Wait()
	got := s.Stats()
	if got.Requests != sum.Requests || got.PromptTokens != sum.PromptTokens || got.CachedTokens != sum.CachedTokens || got.OutputTokens != sum.OutputTokens {
		t.Errorf("server counted %+v, the answers sum to %+v", got, sum)
	}
	if sum.CachedTokens == 0 {
		t.Error("no request hit the cache, though prefixes repeat")
	}
	if st := s.State(); st.Running != 0 || st.Waiting != 0 || st.Usage != 0 {
		t.Errorf("idle server: %+v, want nothing running, waiting or held", st)
	}
}

func TestServerDropsAbortedRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRunning = 1
	s := startServer(t, cfg, 1)
	go func() { _, _ = s.Submit(context.Background(), completion("long", 1000), nil) }() // runs for 13 s simulated
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.Submit(ctx, completion("waits", 5), nil); errc <- err }()
	wait.ForEvery(t, 5*time.Second, time.Millisecond, func() string {
		if st := s.State(); st.Waiting != 1 {
			return fmt.Sprintf("the second request never waited: %+v", st)
		}
		return ""
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("aborted request: %v", err)
	}
	wait.ForEvery(t, 5*time.Second, time.Millisecond, func() string {
		if st := s.Stats(); st.Aborted != 1 {
			return fmt.Sprintf("the aborted request was not dropped: %+v", st)
		}
		return ""
	})
}
