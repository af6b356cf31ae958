// Package loadgen is the routing benchmark's load generator, acting as the gateway
// in front of EPP replicas: conversations arrive open-loop (at their Poisson
// arrival times); each request goes to an EPP replica chosen at random among those
// the gateway lists (as a Service spreads connections over its ready endpoints;
// the list may change during a run, as in a rolling update), through the ext_proc
// exchange as Envoy runs it, then to the endpoint the EPP picked, and the answer
// back through the EPP. Every request is recorded with when it was sent, the
// replica, the server, its tokens and simulated TTFT.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
)

// Options configure a run.
type Options struct {
	// Clock is the servers' simulated clock: arrivals and think times are on it.
	Clock *modelsim.Clock
	// Start is when (on Clock) the workload's time 0 is.
	Start time.Duration
	// Gateway lists the EPP replicas requests go to.
	Gateway *Gateway
	// Servers maps an endpoint the EPP may pick (ip:port) to a server's index.
	Servers map[string]int
	// Model is the model requests name.
	Model string
	// Seed picks the replicas (each request's choice depends only on the seed, its
	// conversation and turn).
	Seed uint64
	// RunID makes request IDs unique across runs.
	RunID string
	// Timeout bounds each request (routing, the server, the response), in wall time.
	Timeout time.Duration
	// Retry: a request whose EPP replica failed before it picked an endpoint (the
	// call broke: a replica killed, say) is sent once more, through another
	// replica the gateway lists, as a gateway that retries on the EPP's other
	// endpoints does (Record.Retried).
	Retry bool
}

// Record is one request's outcome.
type Record struct {
	Conv, Turn int
	// Sent is when (on Clock, from Start) the request was sent.
	Sent time.Duration
	// Replica is the name of the replica that routed it.
	Replica string
	// Server is the index of the server the EPP picked (-1: none, or unknown).
	Server   int
	Endpoint string
	// PromptTokens is the generator's own count of the prompt; the others are the
	// server's (usage).
	PromptTokens, ServerPromptTokens, CachedTokens, OutputTokens int
	// ReuseTokens is how much of the prompt an earlier request of the workload
	// sent: the previous turn's prompt, or a shared prefix after its group's first
	// request (0: none).
	ReuseTokens int
	// TTFT is the server's simulated time to first token.
	TTFT time.Duration
	// Route is the wall time the EPP took to pick (headers and body sent, until
	// its answers).
	Route time.Duration
	// Retried: its first EPP replica failed before it picked, and another one
	// routed it (Options.Retry).
	Retried bool
	// AnswerOK says the answer was the simulator's for this prompt.
	AnswerOK bool
	Err      string
}

// Run sends convs (in arrival order) until every conversation ended, or ctx ends
// (the rest is not sent), and returns the records, in no particular order.
func Run(ctx context.Context, o Options, convs []workload.Conversation) []Record {
	var mu sync.Mutex
	var records []Record
	var wg sync.WaitGroup
	transport := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	seen := newGroups()
	for i := range convs {
		if !o.Clock.SleepUntil(ctx, o.Start+convs[i].Arrival) {
			break
		}
		wg.Go(func() {
			rs := o.conversation(ctx, client, convs[i], seen)
			mu.Lock()
			records = append(records, rs...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return records
}

// groups remembers which shared prefixes were sent, for ReuseTokens.
type groups struct {
	mu   sync.Mutex
	sent map[int]bool
}

func newGroups() *groups { return &groups{sent: map[int]bool{}} }

func (g *groups) first(group int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sent[group] {
		return false
	}
	g.sent[group] = true
	return true
}

// conversation sends c's turns, each after the previous answer and its think time.
func (o Options) conversation(ctx context.Context, client *http.Client, c workload.Conversation, seen *groups) []Record {
	var out []Record
	var answers []string
	prevPrompt := 0
	for k, t := range c.Turns {
		if k > 0 && !o.Clock.Sleep(ctx, t.Think) {
			return out
		}
		req := c.Request(k, answers)
		req.Model = o.Model
		prompt := req.Render()
		rec := Record{Conv: c.ID, Turn: k, Server: -1, PromptTokens: modelsim.TokenCount(prompt)}
		switch {
		case k > 0:
			rec.ReuseTokens = prevPrompt
		case !c.Chat && !seen.first(c.Group):
			rec.ReuseTokens = modelsim.TokenCount([]byte(c.Prefix))
		}
		prevPrompt = rec.PromptTokens
		answer, err := o.send(ctx, client, c, req, &rec)
		if err != nil {
			rec.Err = err.Error()
			out = append(out, rec)
			return out // a conversation cannot go on without its answer
		}
		_, want := modelsim.Continuation(prompt, req.OutputTokens(), c.Chat)
		rec.AnswerOK = answer == string(want)
		answers = append(answers, answer)
		out = append(out, rec)
	}
	return out
}

// choice is the random number that picks the replica of a turn: a function of the
// seed, the conversation and the turn only, so that every configuration of a run
// sees the same choices (among the same number of replicas).
func (o Options) choice(conv, turn int) uint64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d/%d/%d", o.Seed, conv, turn)
	return rand.New(rand.NewPCG(h.Sum64(), 0)).Uint64() //nolint:gosec // a benchmark's choice
}

// send runs one request through an EPP replica to the server it picks and back.
func (o Options) send(ctx context.Context, client *http.Client, c workload.Conversation, req modelsim.Request, rec *Record) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	rec.Sent = o.Clock.Now() - o.Start
	replica, release, err := o.Gateway.pick(o.choice(c.ID, rec.Turn))
	if err != nil {
		return "", err
	}
	defer release()
	rec.Replica = replica.Name
	start := time.Now()
	if err := o.Gateway.wait(ctx, replica.Name); err != nil {
		return "", fmt.Errorf("routing: held by the gateway: %w", err)
	}
	r, err := replica.Client.Route(ctx, extproc.Call{Path: c.Path(), Body: body, ID: fmt.Sprintf("%s-%d-%d", o.RunID, c.ID, rec.Turn)})
	if err != nil && o.Retry && ctx.Err() == nil {
		other, releaseOther, perr := o.Gateway.pickOther(o.choice(c.ID, rec.Turn), replica.Name)
		if perr == nil {
			defer releaseOther()
			rec.Retried, rec.Replica = true, other.Name
			r, err = other.Client.Route(ctx, extproc.Call{Path: c.Path(), Body: body, ID: fmt.Sprintf("%s-%d-%d-retry", o.RunID, c.ID, rec.Turn)})
		}
	}
	if err != nil {
		return "", fmt.Errorf("routing: %w", err)
	}
	rec.Route = time.Since(start)
	rec.Endpoint = r.Endpoint
	if r.LBEndpoint != r.Endpoint {
		r.Abort()
		return "", fmt.Errorf("the EPP named %s in the header and %s in the envoy.lb metadata", r.Endpoint, r.LBEndpoint)
	}
	server, ok := o.Servers[r.Endpoint]
	if !ok {
		r.Abort()
		return "", fmt.Errorf("the EPP picked %s, which is no model server of the run", r.Endpoint)
	}
	rec.Server = server
	status, respBody, header, err := post(ctx, client, "http://"+r.Endpoint+c.Path(), r.Body)
	if err != nil {
		r.Abort()
		return "", fmt.Errorf("server %d: %w", server, err)
	}
	if err := r.Respond(ctx, status, "application/json", respBody); err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("server %d answered %d: %s", server, status, respBody)
	}
	var resp modelsim.Response
	if err := json.Unmarshal(respBody, &resp); err != nil {
		return "", fmt.Errorf("server %d: %w", server, err)
	}
	rec.ServerPromptTokens = resp.Usage.PromptTokens
	rec.CachedTokens = resp.Usage.PromptTokensDetails.CachedTokens
	rec.OutputTokens = resp.Usage.CompletionTokens
	if us, err := strconv.ParseInt(header.Get(modelsim.HeaderTTFT), 10, 64); err == nil {
		rec.TTFT = time.Duration(us) * time.Microsecond
	}
	return resp.Answer(), nil
}

func post(ctx context.Context, client *http.Client, url string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, modelsim.MaxBodyBytes))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, b, resp.Header, nil
}
