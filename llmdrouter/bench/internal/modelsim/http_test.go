package modelsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	extractormetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

func post(t *testing.T, url, body string) (Response, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body)) //nolint:noctx // a test's loopback server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	var r Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r, resp.Header
}

func TestHTTPAnswersAsOpenAIWithCachedTokens(t *testing.T) {
	s := startServer(t, DefaultConfig(), 100)
	srv := httptest.NewServer(s.Handler("server-0", nil))
	defer srv.Close()
	prompt := strings.Repeat("abcd", 200)
	body := `{"model":"m","prompt":"` + prompt + `","max_tokens":10}`
	post(t, srv.URL+"/v1/completions", body)
	r, h := post(t, srv.URL+"/v1/completions", body)
	if r.Object != "text_completion" || r.Usage.PromptTokens != 200 || r.Usage.CompletionTokens != 10 || r.Usage.PromptTokensDetails.CachedTokens != 192 || len(r.Answer()) != 40 {
		t.Errorf("completion: %+v, answer %q", r, r.Answer())
	}
	if h.Get(HeaderServer) != "server-0" || h.Get(HeaderTTFT) == "" {
		t.Errorf("headers %v lack the server and the TTFT", h)
	}
	chat := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":12}`
	r, _ = post(t, srv.URL+"/v1/chat/completions", chat)
	if r.Object != "chat.completion" || r.Choices[0].Message == nil || r.Choices[0].Message.Role != "assistant" || len(r.Answer()) != 12*4-len(AssistantRole) {
		t.Errorf("chat: %+v", r)
	}
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m"}`)) //nolint:noctx // a test's loopback server
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte("prompt")) {
		t.Errorf("a request without a prompt: %d %s, want 400 naming prompt", resp.StatusCode, b)
	}
}

// TestMetricsAsLLMDRouterReadsThem parses the server's /metrics as llm-d-router's
// metrics data source does and runs upstream's core-metrics-extractor (the vLLM
// mapping, unchanged) on them, while requests run and wait: the endpoint's queue,
// running requests, KV-cache usage and cache configuration come out as the server
// has them, on both pages.
func TestMetricsAsLLMDRouterReadsThem(t *testing.T) {
	for _, page := range []MetricsPage{VLLMPage, CorePage} {
		t.Run(string(page), func(t *testing.T) { testMetricsAsLLMDRouterReadsThem(t, page) })
	}
}

func testMetricsAsLLMDRouterReadsThem(t *testing.T, page MetricsPage) {
	cfg := DefaultConfig()
	cfg.Page = page
	cfg.MaxRunning = 2
	cfg.CapacityBlocks = 100
	s := startServer(t, cfg, 0.05) // slow: the requests stay while the test looks
	srv := httptest.NewServer(s.Handler("server-0", nil))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		wg.Go(func() { _, _ = s.Submit(ctx, completion(strings.Repeat(strconv.Itoa(i), 4*100), 100), nil) })
	}
	wait.ForEvery(t, 10*time.Second, time.Millisecond, func() string {
		if st := s.State(); st.Running != 2 || st.Waiting != 1 {
			return fmt.Sprintf("3 requests, at most 2 running: %+v", st)
		}
		return ""
	})
	resp, err := http.Get(srv.URL + "/metrics") //nolint:noctx // a test's loopback server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation) // as llm-d-router's metrics data source parses
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("llm-d-router's parser refuses the metrics: %v", err)
	}
	ext, err := extractormetrics.CoreMetricsExtractorFactory("core-metrics-extractor", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{}, nil)
	if err := ext.(*extractormetrics.Extractor).Extract(context.Background(), fwkdl.PollInput[sourcemetrics.PrometheusMetricMap]{Payload: families, Endpoint: ep}); err != nil {
		t.Fatalf("upstream's extractor: %v", err)
	}
	m := ep.GetMetrics()
	// Two requests of 200 tokens (prompt and answer): 4 blocks each held, of 100.
	if m.RunningRequestsSize != 2 || m.WaitingQueueSize != 1 || m.KVCacheUsagePercent != 0.08 || m.CacheBlockSize != 64 || m.CacheNumBlocks != 100 {
		t.Errorf("upstream read running %d, waiting %d, KV usage %v, block size %d, blocks %d; want 2, 1, 0.08, 64, 100",
			m.RunningRequestsSize, m.WaitingQueueSize, m.KVCacheUsagePercent, m.CacheBlockSize, m.CacheNumBlocks)
	}
	for _, name := range []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total"} {
		if families[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}
