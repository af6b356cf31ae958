package main

import (
	"fmt"
	"math"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
)

// The two sizes of every workload.
const (
	sizeFits    = "fits"    // the working set fits the fleet's KV caches
	sizeExceeds = "exceeds" // it does not
)

// benchCapacity is the bench's KV cache per server, in blocks of 64 tokens:
// 16,384 tokens, an eighth of what an A100 40GB holds for Llama-3.1-8B
// (modelsim.DefaultConfig). A working set several times the fleet's caches then
// builds up within seconds of simulated time, and the workloads below are sized
// against it.
const benchCapacity = 256

// preset is the workload of kind and size, with its count scaled by scale; the
// sizes are against 8 servers of benchCapacity blocks (a fleet of 2,048 blocks,
// 131,072 tokens).
//
// Multi-turn (agentic sessions): 8 groups share a 256-token system prompt; a
// session opens with a context message (a task, a document) and then, turn after
// turn, gets a 32-token answer (a tool call) and sends a 96-token message (its
// result) after a think time of 3 s on average, for 5 turns. 2.6 sessions arrive a
// second for 23 s: about 48 are in flight at once by the end. Fits: 256-token contexts; a
// session ends at about 1,060 tokens (17 blocks), those in flight hold about 0.4 of
// the fleet's caches. Exceeds: 4,608-token contexts; a session ends at about 5,400
// tokens (85 blocks), those in flight hold about 2 times the fleet's caches.
//
// Shared prefix: requests of a group share a prefix and add a 96-token question,
// for a 32-token answer; 10 arrive a second for 30 s. Fits: 12 groups of 1,024
// tokens (192 blocks: every server can hold every prefix). Exceeds: 96 groups of
// 3,072 tokens (4,608 blocks, 2.25 times the fleet's caches).
func preset(kind workload.Kind, size string, scale float64) (workload.Spec, error) {
	var s workload.Spec
	switch kind {
	case workload.MultiTurn:
		s = workload.Spec{Kind: kind, Groups: 8, PrefixTokens: 256, QuestionTokens: 96, AnswerTokens: 32,
			Turns: 5, Think: 3 * time.Second, Rate: 2.6, Count: 60}
		switch size {
		case sizeFits:
			s.ContextTokens = 256
		case sizeExceeds:
			s.ContextTokens = 4608
		}
	case workload.SharedPrefix:
		s = workload.Spec{Kind: kind, QuestionTokens: 96, AnswerTokens: 32, Turns: 1, Rate: 10, Count: 300}
		switch size {
		case sizeFits:
			s.Groups, s.PrefixTokens = 12, 1024
		case sizeExceeds:
			s.Groups, s.PrefixTokens = 96, 3072
		}
	}
	if size != sizeFits && size != sizeExceeds {
		return s, fmt.Errorf("no workload %s of size %q (want %s or %s)", kind, size, sizeFits, sizeExceeds)
	}
	s.Count = max(1, int(math.Round(float64(s.Count)*scale)))
	return s, nil
}
