package workload

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
)

func multiTurn() Spec {
	return Spec{Kind: MultiTurn, Groups: 3, PrefixTokens: 100, ContextTokens: 300, QuestionTokens: 40, AnswerTokens: 20,
		Turns: 4, Think: time.Second, Rate: 2, Count: 20}
}

func TestGenerateIsDeterministicAndSaltChangesOnlyText(t *testing.T) {
	a, err := Generate(multiTurn(), 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(multiTurn(), 1, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed and salt gave another workload")
	}
	c, _ := Generate(multiTurn(), 1, 8)
	for i := range a {
		if a[i].Arrival != c[i].Arrival || a[i].Group != c[i].Group || len(a[i].Prefix) != len(c[i].Prefix) || a[i].Prefix == c[i].Prefix {
			t.Fatalf("conversation %d: another salt must keep the arrival, group and lengths and change the text", i)
		}
		for k := range a[i].Turns {
			if a[i].Turns[k].Think != c[i].Turns[k].Think || len(a[i].Turns[k].User) != len(c[i].Turns[k].User) {
				t.Fatalf("conversation %d turn %d: another salt changed the think time or a length", i, k)
			}
		}
	}
	d, _ := Generate(multiTurn(), 2, 7)
	if d[0].Arrival == a[0].Arrival {
		t.Error("another seed gave the same first arrival")
	}
	if Requests(a) != 20*4 {
		t.Errorf("%d requests, want 80", Requests(a))
	}
}

// TestTurnsExtendThePreviousTurn: every turn's prompt, as the simulator tokenizes
// it, starts with the previous turn's prompt and answer, block for block, and is
// as long as the spec says.
func TestTurnsExtendThePreviousTurn(t *testing.T) {
	spec := multiTurn()
	convs, _ := Generate(spec, 3, 0)
	c := convs[0]
	answers := c.Answers()
	var prev modelsim.Tokens
	for k := range c.Turns {
		tok := modelsim.Tokenize(c.Request(k, answers[:k]), 16)
		want := spec.PrefixTokens + spec.ContextTokens + k*(spec.AnswerTokens+spec.QuestionTokens)
		if tok.Prompt != want {
			t.Errorf("turn %d: %d prompt tokens, want %d", k, tok.Prompt, want)
		}
		if k > 0 {
			full := (prev.Prompt + prev.Output) / 16
			if !slices.Equal(tok.PromptBlocks[:full], prev.SequenceBlocks[:full]) {
				t.Errorf("turn %d does not start with turn %d's prompt and answer", k, k-1)
			}
		}
		prev = tok
	}
}

func TestSharedPrefixRequestsShareTheirGroupsPrefix(t *testing.T) {
	spec := Spec{Kind: SharedPrefix, Groups: 2, PrefixTokens: 64, QuestionTokens: 10, AnswerTokens: 5, Turns: 1, Rate: 10, Count: 30}
	convs, _ := Generate(spec, 1, 0)
	prefix := map[int][]uint64{}
	for _, c := range convs {
		tok := modelsim.Tokenize(c.Request(0, nil), 16)
		if tok.Prompt != 74 || c.Path() != "/v1/completions" {
			t.Fatalf("%d prompt tokens to %s, want 74 to /v1/completions", tok.Prompt, c.Path())
		}
		if p, ok := prefix[c.Group]; ok && !slices.Equal(p, tok.PromptBlocks[:4]) {
			t.Errorf("group %d: a request does not start with the group's prefix", c.Group)
		}
		prefix[c.Group] = tok.PromptBlocks[:4]
	}
	if len(prefix) != 2 {
		t.Errorf("%d groups used, want 2", len(prefix))
	}
}

// TestReplayOrdersRoutings: on a workload that fits, one unbounded cache hits
// every repeated token, sticky routing (a conversation on one server) nearly as
// much, and random routing less.
func TestReplayOrdersRoutings(t *testing.T) {
	convs, _ := Generate(multiTurn(), 5, 0)
	const servers, capacity, block = 4, 1 << 20, 16
	ceiling := ReplayCaches(convs, 1, capacity, block, func(int, int) int { return 0 })
	sticky := ReplayCaches(convs, servers, capacity, block, func(conv, _ int) int { return conv % servers })
	random := ReplayCaches(convs, servers, capacity, block, func(conv, turn int) int { return (conv*7 + turn*3) % servers })
	if !(ceiling.HitRate() >= sticky.HitRate() && sticky.HitRate() > random.HitRate() && random.HitRate() > 0) {
		t.Errorf("hit rates: ceiling %.3f, sticky %.3f, random %.3f; want ceiling ≥ sticky > random > 0", ceiling.HitRate(), sticky.HitRate(), random.HitRate())
	}
	if ceiling.PromptTokens != sticky.PromptTokens {
		t.Errorf("the replays counted %d and %d prompt tokens of the same workload", ceiling.PromptTokens, sticky.PromptTokens)
	}
	// A cache too small for one conversation hits nothing of the conversation.
	tiny := ReplayCaches(convs, 1, 30, block, func(int, int) int { return 0 })
	if tiny.HitRate() >= sticky.HitRate() {
		t.Errorf("a tiny cache hit %.3f, not less than %.3f", tiny.HitRate(), sticky.HitRate())
	}
}

func TestSpecValidationNamesTheField(t *testing.T) {
	s := multiTurn()
	s.AnswerTokens = 1
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "answer tokens") {
		t.Errorf("answer tokens 1: %v", err)
	}
	s = multiTurn()
	s.Rate = 0
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Errorf("rate 0: %v", err)
	}
}
