package modelsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Response headers that carry a request's simulated timing (microseconds of
// simulated time), beside the OpenAI body.
const (
	HeaderTTFT   = "X-Modelsim-Ttft-Us"
	HeaderQueued = "X-Modelsim-Queued-Us"
	HeaderServer = "X-Modelsim-Server"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 16 << 20

// Usage is an OpenAI response's usage, with vLLM's cached prompt tokens.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Choice is one answer: Text for completions, Message for chat.
type Choice struct {
	Index        int      `json:"index"`
	Text         *string  `json:"text,omitempty"`
	Message      *Message `json:"message,omitempty"`
	FinishReason string   `json:"finish_reason"`
}

// Response is an OpenAI completions or chat-completions response body.
type Response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

// Answer is the text of the response's first choice.
func (r Response) Answer() string {
	if len(r.Choices) == 0 {
		return ""
	}
	if c := r.Choices[0]; c.Message != nil {
		return c.Message.Content
	} else if c.Text != nil {
		return *c.Text
	}
	return ""
}

var responseIDs atomic.Int64

// Handler serves the server's API (name is what HeaderServer says): POST
// /v1/completions and /v1/chat/completions, GET /metrics (vLLM's metrics), /health
// and /v1/models. stopped ends the requests in flight.
func (s *Server) Handler(name string, stopped <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	serve := func(chat bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			if err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			req, err := ParseRequest(body, chat)
			if err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			res, err := s.Submit(r.Context(), req, stopped)
			switch {
			case errors.Is(err, ErrTooLong):
				writeError(w, http.StatusBadRequest, err)
				return
			case err != nil:
				writeError(w, http.StatusServiceUnavailable, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(HeaderServer, name)
			w.Header().Set(HeaderTTFT, strconv.FormatInt(res.TTFT().Microseconds(), 10))
			w.Header().Set(HeaderQueued, strconv.FormatInt((res.Admitted-res.Arrival).Microseconds(), 10))
			_ = json.NewEncoder(w).Encode(response(req, res))
		}
	}
	mux.HandleFunc("POST /v1/completions", serve(false))
	mux.HandleFunc("POST /v1/chat/completions", serve(true))
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.scrapes.Add(1)
		s.WriteMetrics(w)
	})
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"modelsim"}]}`+"\n", s.cfg.Model)
	})
	return mux
}

func response(req Request, res Result) Response {
	out := Response{
		ID:      fmt.Sprintf("cmpl-%d", responseIDs.Add(1)),
		Object:  "text_completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Usage: Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.OutputTokens,
			TotalTokens: res.PromptTokens + res.OutputTokens},
	}
	out.Usage.PromptTokensDetails.CachedTokens = res.CachedTokens
	text := res.Text
	if req.Chat() {
		out.ID = "chat" + out.ID
		out.Object = "chat.completion"
		out.Choices = []Choice{{Message: &Message{Role: AssistantRole, Content: text}, FinishReason: "length"}}
	} else {
		out.Choices = []Choice{{Text: &text, FinishReason: "length"}}
	}
	return out
}

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": err.Error(), "code": code}})
}

// WriteMetrics writes the server's /metrics page in Prometheus' text format, as a
// vLLM v1 server with one engine renders it (see metrics.go): among its families
// the gauges llm-d-router's core-metrics-extractor reads for vLLM
// (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
// a fraction, and vllm:cache_config_info with block_size and num_gpu_blocks as
// labels, which the approximate prefix index's autoTune reads), vLLM's counters
// and its default histograms with their buckets, fed by the simulated requests.
func (s *Server) WriteMetrics(w io.Writer) {
	s.mu.Lock()
	st, stats, engine := s.state(), s.stats, s.engine.clone()
	s.mu.Unlock()
	writeMetrics(w, s.cfg, st, stats, engine)
}

// IdleMetrics is the /metrics page of a server of cfg with nothing running,
// waiting or cached, nothing served yet (the capacity bench's servers, which
// answer at once): as long as a busy server's page, within a few bytes.
func IdleMetrics(cfg Config) []byte {
	var b bytes.Buffer
	writeMetrics(&b, cfg, State{}, Stats{}, newEngineMetrics(cfg.ContextTokens()))
	return b.Bytes()
}

// Immediate is the response to req answered at once with text, for a prompt of
// promptTokens, nothing cached: what a server that costs nothing answers.
func Immediate(req Request, promptTokens int, text string) Response {
	return response(req, Result{PromptTokens: promptTokens, OutputTokens: req.OutputTokens(), Text: text})
}
