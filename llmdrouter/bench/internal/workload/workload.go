// Package workload generates the routing benchmark's seeded, deterministic
// workloads as conversations: multi-turn chat sessions whose groups share a system
// prompt and whose turns each append the previous answer and a new question, and
// shared-prefix completion requests in groups (as inference-perf's shared_prefix
// data or SGLang's generated-shared-prefix). A seed fixes the structure (arrivals,
// groups, lengths, think times); a salt varies only the text, so that two runs of
// one seed send the same load with no prefix in common.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
)

// Kind is a workload's shape.
type Kind string

// The workload kinds.
const (
	// MultiTurn: chat sessions arrive as a Poisson process; each belongs to a group
	// whose system prompt it shares, starts with a context message and goes on,
	// after a think time, with the previous answer and a new question, turn after
	// turn.
	MultiTurn Kind = "multi-turn"
	// SharedPrefix: completion requests arrive as a Poisson process; each is a
	// group's shared prefix followed by a question of its own.
	SharedPrefix Kind = "shared-prefix"
)

// Spec describes a workload. Lengths are in tokens of modelsim.BytesPerToken bytes;
// times are simulated.
type Spec struct {
	Kind Kind
	// Groups is how many system prompts (multi-turn) or shared prefixes there are.
	Groups int
	// PrefixTokens is a group's system prompt or shared prefix.
	PrefixTokens int
	// ContextTokens is a session's first user message (multi-turn).
	ContextTokens int
	// QuestionTokens is every later user message, or a shared-prefix request's own
	// part.
	QuestionTokens int
	// AnswerTokens is every answer's length (max_tokens).
	AnswerTokens int
	// Turns is a session's number of turns (multi-turn; 1 for shared-prefix).
	Turns int
	// Think is the mean think time between an answer and the next turn
	// (exponential; multi-turn).
	Think time.Duration
	// Rate is how many sessions (multi-turn) or requests (shared-prefix) arrive per
	// simulated second.
	Rate float64
	// Count is how many sessions or requests there are in all.
	Count int
}

// Validate names the first field out of range.
func (s Spec) Validate() error {
	check := []struct {
		name  string
		v     int
		least int
	}{{"groups", s.Groups, 1}, {"prefix tokens", s.PrefixTokens, 2}, {"question tokens", s.QuestionTokens, 2},
		{"answer tokens", s.AnswerTokens, 3}, {"turns", s.Turns, 1}, {"count", s.Count, 1}}
	if s.Kind == MultiTurn {
		check = append(check, struct {
			name  string
			v     int
			least int
		}{"context tokens", s.ContextTokens, 2})
	}
	for _, c := range check {
		if c.v < c.least {
			return fmt.Errorf("workload %s: %s %d, want at least %d", s.Kind, c.name, c.v, c.least)
		}
	}
	if s.Kind != MultiTurn && s.Kind != SharedPrefix {
		return fmt.Errorf("workload kind %q: want %s or %s", s.Kind, MultiTurn, SharedPrefix)
	}
	if s.Rate <= 0 || math.IsInf(s.Rate, 0) || s.Think < 0 {
		return fmt.Errorf("workload %s: rate %v and think time %v: want a positive rate", s.Kind, s.Rate, s.Think)
	}
	return nil
}

// Conversation is one session (or one shared-prefix request, a conversation of one
// turn).
type Conversation struct {
	ID      int
	Arrival time.Duration
	Group   int
	// Chat: requests go to /v1/chat/completions with messages; otherwise to
	// /v1/completions with Prefix followed by the turn's User as the prompt.
	Chat bool
	// Prefix is the group's system prompt (chat) or shared prefix (completion).
	Prefix string
	Turns  []Turn
}

// Turn is one request of a conversation.
type Turn struct {
	// Think is how long the client waits after the previous answer.
	Think time.Duration
	// User is the new user message (chat) or the prompt's own part (completion).
	User      string
	MaxTokens int
}

// Generate is spec's conversations for seed, in arrival order, with text varied by
// salt.
func Generate(spec Spec, seed, salt uint64) ([]Conversation, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	shape := rand.New(rand.NewPCG(seed, 0x5eed))         //nolint:gosec // a benchmark's workload
	text := rand.New(rand.NewPCG(seed, salt^0x7e47c0de)) //nolint:gosec // a benchmark's workload
	chat := spec.Kind == MultiTurn
	prefixes := make([]string, spec.Groups)
	for g := range prefixes {
		if chat {
			prefixes[g] = content(text, "system", spec.PrefixTokens)
		} else {
			prefixes[g] = content(text, "", spec.PrefixTokens)
		}
	}
	out := make([]Conversation, spec.Count)
	var at time.Duration
	for i := range out {
		at += time.Duration(shape.ExpFloat64() / spec.Rate * float64(time.Second))
		c := Conversation{ID: i, Arrival: at, Group: shape.IntN(spec.Groups), Chat: chat}
		c.Prefix = prefixes[c.Group]
		for k := range spec.Turns {
			t := Turn{MaxTokens: spec.AnswerTokens}
			switch {
			case !chat:
				t.User = content(text, "", spec.QuestionTokens)
			case k == 0:
				t.User = content(text, "user", spec.ContextTokens)
			default:
				t.Think = time.Duration(shape.ExpFloat64() * float64(spec.Think))
				t.User = content(text, "user", spec.QuestionTokens)
			}
			c.Turns = append(c.Turns, t)
		}
		out[i] = c
	}
	return out, nil
}

// content is text that, after role, makes exactly tokens tokens: every message
// then starts on a token boundary, so that a conversation's next turn extends the
// previous one's tokens (as a chat template's fixed tokens do).
func content(rng *rand.Rand, role string, tokens int) string {
	return string(modelsim.Words(rng, tokens*modelsim.BytesPerToken-len(role)))
}

// Request is turn k of c as a request body's fields, given the answers of the
// turns before it.
func (c Conversation) Request(k int, answers []string) modelsim.Request {
	max := c.Turns[k].MaxTokens
	if !c.Chat {
		p := c.Prefix + c.Turns[k].User
		return modelsim.Request{Prompt: &p, MaxTokens: &max}
	}
	msgs := []modelsim.Message{{Role: "system", Content: c.Prefix}}
	for i := range k {
		msgs = append(msgs, modelsim.Message{Role: "user", Content: c.Turns[i].User}, modelsim.Message{Role: modelsim.AssistantRole, Content: answers[i]})
	}
	msgs = append(msgs, modelsim.Message{Role: "user", Content: c.Turns[k].User})
	return modelsim.Request{Messages: msgs, MaxTokens: &max}
}

// Path is the API path of c's requests.
func (c Conversation) Path() string {
	if c.Chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// Answers are c's answers as the simulator gives them (a function of each prompt).
func (c Conversation) Answers() []string {
	var answers []string
	for k := range c.Turns {
		req := c.Request(k, answers)
		_, text := modelsim.Continuation(req.Render(), req.OutputTokens(), c.Chat)
		answers = append(answers, string(text))
	}
	return answers
}

// Requests counts the requests of convs.
func Requests(convs []Conversation) int {
	n := 0
	for _, c := range convs {
		n += len(c.Turns)
	}
	return n
}

// Replay is what a fleet of caches hits on convs when a router sends each request
// where route says, in the order the requests would come if servers answered at
// once (each conversation's turns after its arrival and think times). It is
// independent of timing: what routing alone decides.
type Replay struct {
	PromptTokens, CachedTokens int64
}

// HitRate is cached over prompt tokens.
func (r Replay) HitRate() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.CachedTokens) / float64(r.PromptTokens)
}

// ReplayCaches runs convs through servers caches of capacity blocks of blockTokens,
// each request on the server route(conversation, turn) picks, with answers cached
// as the simulator caches them.
func ReplayCaches(convs []Conversation, servers, capacity, blockTokens int, route func(conv, turn int) int) Replay {
	type event struct {
		at         time.Duration
		conv, turn int
	}
	var events []event
	for i, c := range convs {
		at := c.Arrival
		for k, t := range c.Turns {
			at += t.Think
			events = append(events, event{at, i, k})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	caches := make([]*modelsim.Cache, servers)
	for i := range caches {
		caches[i] = modelsim.NewCache(capacity)
	}
	answers := make([][]string, len(convs))
	var r Replay
	for _, e := range events {
		c := convs[e.conv]
		t := modelsim.Tokenize(c.Request(e.turn, answers[e.conv]), blockTokens)
		answers[e.conv] = append(answers[e.conv], string(t.Answer))
		hit, ok := caches[route(e.conv, e.turn)].Serve(t)
		if !ok {
			continue // longer than the cache: the simulator refuses it too
		}
		r.PromptTokens += int64(t.Prompt)
		r.CachedTokens += int64(hit * blockTokens)
	}
	return r
}
