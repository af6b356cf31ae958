package modelsim

import (
	"bytes"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parsePage parses a /metrics page as llm-d-router's metrics data source does.
func parsePage(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("llm-d-router's parser refuses the page: %v", err)
	}
	return families
}

// TestThePageIsAVLLMServersPage: the page has vLLM v1's default families with the
// types and buckets vLLM gives them, counters under their _total names (as
// prometheus_client renders them, so that a parser sees counters, not untyped
// series), and its histograms, counters and gauges move with what the server
// serves. A page much smaller than a real one would understate what scraping costs
// an EPP (the capacity bench's servers serve the idle page).
func TestThePageIsAVLLMServersPage(t *testing.T) {
	cfg := DefaultConfig()
	s := startServer(t, cfg, 100)
	const requests = 5
	for i := range requests {
		submit(t, s, completion(strings.Repeat("abcd", 64*(i+1)), 20))
	}
	var b bytes.Buffer
	s.WriteMetrics(&b)
	families := parsePage(t, b.Bytes())

	kinds := map[dto.MetricType][]string{
		dto.MetricType_GAUGE: {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
			"vllm:engine_sleep_state", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"},
		dto.MetricType_COUNTER: {"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:prompt_tokens_by_source_total",
			"vllm:prompt_tokens_cached_total", "vllm:generation_tokens_total", "vllm:request_success_total",
			"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total",
			"vllm:external_prefix_cache_hits_total", "vllm:mm_cache_queries_total", "vllm:mm_cache_hits_total"},
	}
	for _, name := range append(requestTokenHistograms, requestLatencyHistogram...) {
		kinds[dto.MetricType_HISTOGRAM] = append(kinds[dto.MetricType_HISTOGRAM], "vllm:"+name)
	}
	kinds[dto.MetricType_HISTOGRAM] = append(kinds[dto.MetricType_HISTOGRAM], "vllm:iteration_tokens_total", "vllm:request_params_n",
		"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds")
	want := 0
	for kind, names := range kinds {
		for _, name := range names {
			want++
			f := families[name]
			if f == nil || f.GetType() != kind {
				t.Errorf("%s: %v, want a %v", name, f.GetType(), kind)
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["engine"] != "0" || (name != "vllm:cache_config_info" && labels["model_name"] != cfg.Model) {
					t.Errorf("%s: labels %v, want model_name %q and engine 0", name, labels, cfg.Model)
				}
			}
		}
	}
	if len(families) != want {
		t.Errorf("%d families, want the %d of vLLM's default page", len(families), want)
	}

	hist := func(name string) *dto.Histogram { return families[name].GetMetric()[0].GetHistogram() }
	// Buckets as vLLM defines them, and +Inf: lengths 1, 2, 5, ... up to the
	// context (131,072 tokens).
	if bs := hist("vllm:request_prompt_tokens").GetBucket(); len(bs) != 17 || bs[15].GetUpperBound() != 100000 {
		t.Errorf("request_prompt_tokens: %d buckets, up to %v before +Inf, want 17 up to 100000", len(bs), bs[len(bs)-2].GetUpperBound())
	}
	if bs := hist("vllm:time_to_first_token_seconds").GetBucket(); len(bs) != len(firstTokenBuckets)+1 || bs[0].GetUpperBound() != 0.001 {
		t.Errorf("time_to_first_token_seconds: %d buckets from %v", len(bs), bs[0].GetUpperBound())
	}
	// What was served: 5 requests of 64 to 320 prompt tokens and 20 answer tokens each.
	for _, name := range []string{"vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds", "vllm:request_prompt_tokens"} {
		if n := hist(name).GetSampleCount(); n != requests {
			t.Errorf("%s counts %d requests, want %d", name, n, requests)
		}
	}
	if n := hist("vllm:inter_token_latency_seconds").GetSampleCount(); n != requests*19 {
		t.Errorf("inter_token_latency_seconds counts %d tokens, want %d (every token after the first)", n, requests*19)
	}
	if sum := hist("vllm:request_prompt_tokens").GetSampleSum(); sum != 64*(1+2+3+4+5) {
		t.Errorf("request_prompt_tokens sums %v, want %d", sum, 64*15)
	}
	computed := hist("vllm:request_prefill_kv_computed_tokens").GetSampleSum()
	if computed >= 64*15 {
		t.Errorf("request_prefill_kv_computed_tokens sums %v: the prompts share a prefix, want less than all of them", computed)
	}
	if iter := hist("vllm:iteration_tokens_total").GetSampleSum(); iter != computed+requests*19 {
		t.Errorf("iteration_tokens_total sums %v tokens, want the prompts' computed tokens and the decoded ones, %v", iter, computed+requests*19)
	}
	for _, m := range families["vllm:request_success_total"].GetMetric() {
		want := 0.0
		if m.GetLabel()[2].GetValue() == "length" {
			want = requests
		}
		if m.GetCounter().GetValue() != want {
			t.Errorf("request_success_total %v: %v, want %v", m.GetLabel(), m.GetCounter().GetValue(), want)
		}
	}

	idle := IdleMetrics(cfg)
	parsePage(t, idle)
	t.Logf("a page is %d bytes (%d idle)", b.Len(), len(idle))
	if len(idle) < 20<<10 || len(idle) > b.Len() {
		t.Errorf("the idle page is %d bytes, the busy one %d: want over 20 KiB, and no more than the busy one", len(idle), b.Len())
	}
}
