package modelsim

import (
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
)

// The /metrics page is the one a vLLM v1 server with one engine and no LoRA
// renders for its model: the families vLLM's PrometheusStatLogger registers by
// default (vllm/v1/metrics/loggers.py), every series labelled model_name and
// engine="0", counters under their _total names as prometheus_client writes them,
// and the default histogram buckets (vllm/v1/metrics, histogram_buckets and its
// snapshot test). Left out: the families of features the simulator does not have
// (LoRA, speculative decoding, KV transfer, --kv-cache-metrics) and the ones
// vLLM's API server adds beside its engine's (http_*, process_*, python_*): a real
// page is larger by those.

// Bucket bounds, in vLLM's families.
var (
	iterationTokenBuckets   = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	paramsNBuckets          = []float64{1, 2, 5, 10, 20}
	firstTokenBuckets       = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	interTokenBuckets       = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	requestLatencyBuckets   = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	finishReasons           = []string{"stop", "length", "abort", "error", "repetition"}
	promptSources           = []string{"local_compute", "local_cache_hit", "external_kv_transfer"}
	sleepStates             = []string{"awake", "weights_offloaded", "discard_all"}
	waitingReasons          = []string{"capacity", "deferred"}
	requestTokenHistograms  = []string{"request_prompt_tokens", "request_generation_tokens", "request_max_num_generation_tokens", "request_params_max_tokens", "request_prefill_kv_computed_tokens"}
	requestLatencyHistogram = []string{"e2e_request_latency_seconds", "request_queue_time_seconds", "request_inference_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"}
)

// oneTwoFive is 1, 2, 5, 10, 20, 50, ... up to most (vLLM's buckets of request
// lengths in tokens, up to the model's context).
func oneTwoFive(most int) []float64 {
	var out []float64
	for e := 1.0; ; e *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if m*e > float64(most) {
				return out
			}
			out = append(out, m*e)
		}
	}
}

// histogram counts observations at or under each bound (the last count is +Inf's).
type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)]++
	h.sum += v
}

func (h *histogram) clone() *histogram {
	return &histogram{bounds: h.bounds, counts: slices.Clone(h.counts), sum: h.sum}
}

// engineMetrics are what a vLLM engine counts beside Stats: its histograms and the
// counters Stats has no field for.
type engineMetrics struct {
	hist                 map[string]*histogram
	iteration, itl, ttft *histogram // of hist, observed every step
	promptByHit          int64      // prompt tokens found in the cache (source local_cache_hit)
}

func newEngineMetrics(contextTokens int) *engineMetrics {
	m := &engineMetrics{hist: map[string]*histogram{
		"iteration_tokens_total":                newHistogram(iterationTokenBuckets),
		"request_params_n":                      newHistogram(paramsNBuckets),
		"time_to_first_token_seconds":           newHistogram(firstTokenBuckets),
		"inter_token_latency_seconds":           newHistogram(interTokenBuckets),
		"request_time_per_output_token_seconds": newHistogram(interTokenBuckets),
	}}
	for _, name := range requestTokenHistograms {
		m.hist[name] = newHistogram(oneTwoFive(contextTokens))
	}
	for _, name := range requestLatencyHistogram {
		m.hist[name] = newHistogram(requestLatencyBuckets)
	}
	m.iteration, m.itl, m.ttft = m.hist["iteration_tokens_total"], m.hist["inter_token_latency_seconds"], m.hist["time_to_first_token_seconds"]
	return m
}

// clone is a copy for a page (its histograms' map holds copies; the fields
// observed every step are left out).
func (m *engineMetrics) clone() *engineMetrics {
	c := &engineMetrics{hist: make(map[string]*histogram, len(m.hist)), promptByHit: m.promptByHit}
	for k, h := range m.hist {
		c.hist[k] = h.clone()
	}
	return c
}

// step records an engine step that computed tokens (one per decoding request and
// the prompt tokens prefilled).
func (m *engineMetrics) step(tokens int) { m.iteration.observe(float64(tokens)) }

// token records a decoded token that came gap after the request's previous one.
func (m *engineMetrics) token(gap time.Duration) {
	m.itl.observe(gap.Seconds())
}

// firstToken records a request's first token, ttft after its arrival.
func (m *engineMetrics) firstToken(ttft time.Duration) {
	m.ttft.observe(ttft.Seconds())
}

// finished records a finished request (as vLLM records one that ends by length).
func (m *engineMetrics) finished(r Result) {
	for name, v := range map[string]float64{
		"request_prompt_tokens":              float64(r.PromptTokens),
		"request_generation_tokens":          float64(r.OutputTokens),
		"request_max_num_generation_tokens":  float64(r.OutputTokens),
		"request_params_max_tokens":          float64(r.OutputTokens),
		"request_prefill_kv_computed_tokens": float64(r.PromptTokens - r.CachedTokens),
		"request_params_n":                   1,
		"e2e_request_latency_seconds":        (r.Finished - r.Arrival).Seconds(),
		"request_queue_time_seconds":         (r.Admitted - r.Arrival).Seconds(),
		"request_inference_time_seconds":     (r.Finished - r.Admitted).Seconds(),
		"request_prefill_time_seconds":       (r.FirstToken - r.Admitted).Seconds(),
		"request_decode_time_seconds":        (r.Finished - r.FirstToken).Seconds(),
	} {
		m.hist[name].observe(v)
	}
	if r.OutputTokens > 1 {
		m.hist["request_time_per_output_token_seconds"].observe((r.Finished - r.FirstToken).Seconds() / float64(r.OutputTokens-1))
	}
	m.promptByHit += int64(r.CachedTokens)
}

// page writes a Prometheus text page, formatting numbers as prometheus_client does.
type page struct {
	b      []byte
	labels string // model_name="...",engine="0"
}

func (p *page) family(name, kind, help string) {
	p.b = append(p.b, "# HELP "...)
	p.b = append(p.b, name...)
	p.b = append(p.b, ' ')
	p.b = append(p.b, help...)
	p.b = append(p.b, "\n# TYPE "...)
	p.b = append(p.b, name...)
	p.b = append(p.b, ' ')
	p.b = append(p.b, kind...)
	p.b = append(p.b, '\n')
}

// sample writes name{labels,extra} v; extra is "" or `key="value"` pairs.
func (p *page) sample(name, extra string, v float64) {
	p.b = append(p.b, name...)
	p.b = append(p.b, '{')
	p.b = append(p.b, p.labels...)
	if extra != "" {
		p.b = append(p.b, ',')
		p.b = append(p.b, extra...)
	}
	p.b = append(p.b, "} "...)
	p.b = appendValue(p.b, v)
	p.b = append(p.b, '\n')
}

func (p *page) gauge(name, help string, v float64) {
	p.family(name, "gauge", help)
	p.sample(name, "", v)
}

func (p *page) counter(name, help string, v float64) {
	p.family(name+"_total", "counter", help)
	p.sample(name+"_total", "", v)
}

// counterBy writes a counter with one more label, a series per value of it
// (values that count nothing are 0).
func (p *page) counterBy(name, help, label string, values []string, v func(string) float64) {
	p.family(name+"_total", "counter", help)
	for _, x := range values {
		p.sample(name+"_total", label+`="`+x+`"`, v(x))
	}
}

func (p *page) histogram(name, help string, h *histogram) {
	p.family(name, "histogram", help)
	var n uint64
	for i, c := range h.counts {
		n += c
		le := "+Inf"
		if i < len(h.bounds) {
			le = string(appendValue(nil, h.bounds[i]))
		}
		p.sample(name+"_bucket", `le="`+le+`"`, float64(n))
	}
	p.sample(name+"_count", "", float64(n))
	p.sample(name+"_sum", "", h.sum)
}

// appendValue formats v as Python's repr does for a float ("1.0", "0.001").
func appendValue(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e16 {
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
		return append(b, ".0"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func writeMetrics(w io.Writer, cfg Config, st State, stats Stats, m *engineMetrics) {
	p := &page{labels: `model_name=` + strconv.Quote(cfg.Model) + `,engine="0"`, b: make([]byte, 0, 32<<10)}
	p.gauge("vllm:num_requests_running", "Requests running in the engine's batch.", float64(st.Running))
	p.gauge("vllm:num_requests_waiting", "Requests waiting to run.", float64(st.Waiting))
	p.gauge("vllm:kv_cache_usage_perc", "Fraction of the KV cache in use (1 is all of it).", st.Usage)
	p.cacheConfig(cfg)
	if cfg.Page != CorePage {
		p.moreGauges(st)
		p.counter("vllm:num_preemptions", "Requests preempted by the engine.", 0)
		p.counterBy("vllm:prompt_tokens_by_source", "Prompt tokens, by where their KV came from.", "source", promptSources, func(s string) float64 {
			switch s {
			case "local_compute":
				return float64(stats.PromptTokens - m.promptByHit)
			case "local_cache_hit":
				return float64(m.promptByHit)
			}
			return 0
		})
		p.counter("vllm:prompt_tokens_cached", "Prompt tokens whose KV was cached.", float64(stats.CachedTokens))
		p.counterBy("vllm:request_success", "Finished requests, by why they ended.", "finished_reason", finishReasons, func(r string) float64 {
			if r == "length" { // every answer is max_tokens long
				return float64(stats.Requests)
			}
			return 0
		})
	}
	p.counter("vllm:prompt_tokens", "Prompt tokens of the requests.", float64(stats.PromptTokens))
	p.counter("vllm:generation_tokens", "Generated tokens.", float64(stats.OutputTokens))
	p.counter("vllm:prefix_cache_queries", "Prefix-cache queries, in tokens.", float64(stats.PromptTokens))
	p.counter("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens.", float64(stats.CachedTokens))
	if cfg.Page == CorePage {
		_, _ = w.Write(p.b)
		return
	}
	p.counter("vllm:external_prefix_cache_queries", "External (KV connector) prefix-cache queries, in tokens.", 0)
	p.counter("vllm:external_prefix_cache_hits", "External (KV connector) prefix-cache hits, in tokens.", 0)
	p.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in items.", 0)
	p.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in items.", 0)

	help := map[string]string{
		"iteration_tokens_total":                "Tokens computed per engine step.",
		"request_params_n":                      "The n parameter of requests.",
		"time_to_first_token_seconds":           "Time to a request's first token.",
		"inter_token_latency_seconds":           "Time between a request's tokens.",
		"request_time_per_output_token_seconds": "A request's mean time per output token after the first.",
		"request_prompt_tokens":                 "Prompt tokens per request.",
		"request_generation_tokens":             "Generated tokens per request.",
		"request_max_num_generation_tokens":     "Most tokens generated by a request's sequences.",
		"request_params_max_tokens":             "The max_tokens parameter of requests.",
		"request_prefill_kv_computed_tokens":    "Prompt tokens a request computed (not cached).",
		"e2e_request_latency_seconds":           "A request's time from arrival to its end.",
		"request_queue_time_seconds":            "A request's time waiting.",
		"request_inference_time_seconds":        "A request's time running.",
		"request_prefill_time_seconds":          "A request's time in prefill.",
		"request_decode_time_seconds":           "A request's time in decode.",
	}
	names := make([]string, 0, len(m.hist))
	for name := range m.hist {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p.histogram("vllm:"+name, help[name], m.hist[name])
	}
	_, _ = w.Write(p.b)
}

// cacheConfig writes vllm:cache_config_info: every field of vLLM's CacheConfig as
// a label (its Python str()), block_size and num_gpu_blocks the server's.
func (p *page) cacheConfig(cfg Config) {
	p.family("vllm:cache_config_info", "gauge", "The engine's cache configuration.")
	p.b = append(p.b, "vllm:cache_config_info{block_size=\""...)
	p.b = strconv.AppendInt(p.b, int64(cfg.BlockTokens), 10)
	p.b = append(p.b, `",cache_dtype="auto",calculate_kv_scales="False",cpu_kvcache_space_bytes="None",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",kv_cache_memory_bytes="None",kv_offloading_backend="None",kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",mamba_cache_dtype="auto",mamba_page_size_padded="None",mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="`...)
	p.b = strconv.AppendInt(p.b, int64(cfg.CapacityBlocks), 10)
	p.b = append(p.b, `",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4"} 1.0`+"\n"...)
}

// moreGauges writes the gauges llm-d-router does not read.
func (p *page) moreGauges(st State) {
	p.family("vllm:num_requests_waiting_by_reason", "gauge", "Requests waiting to run, by why they wait.")
	for _, r := range waitingReasons {
		v := 0.0
		if r == "capacity" {
			v = float64(st.Waiting)
		}
		p.sample("vllm:num_requests_waiting_by_reason", `reason="`+r+`"`, v)
	}
	p.family("vllm:engine_sleep_state", "gauge", "The engine's sleep state (1 for the state it is in).")
	for _, s := range sleepStates {
		v := 0.0
		if s == "awake" {
			v = 1
		}
		p.sample("vllm:engine_sleep_state", `sleep_state="`+s+`"`, v)
	}
}
