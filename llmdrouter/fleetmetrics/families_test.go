package fleetmetrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	extractormetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"
)

// decoys are families of a real page that no extractor reads.
const decoys = `# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.1"} 3
http_request_duration_seconds_bucket{le="+Inf"} 4
http_request_duration_seconds_sum 0.7
http_request_duration_seconds_count 4
`

// enginePages are a page of each engine upstream's core-metrics-extractor knows by
// default, with the families its configuration for that engine reads.
var enginePages = map[string]string{
	"vllm": vllmPage + `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.7e+09
`,
	"sglang": `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs 2
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs 5
# TYPE sglang:token_usage gauge
sglang:token_usage 0.4
# TYPE sglang:cache_config_info gauge
sglang:cache_config_info{num_pages="1000",page_size="32"} 1
`,
	"trtllm-serve": `# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting 1
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running 2
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization 0.3
# TYPE trtllm_kv_cache_tokens_per_block gauge
trtllm_kv_cache_tokens_per_block 32
# TYPE trtllm_kv_cache_max_blocks gauge
trtllm_kv_cache_max_blocks 900
`,
	"triton-tensorrt-llm": `# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{request_type="waiting"} 4
nv_trt_llm_request_metrics{request_type="scheduled"} 6
nv_trt_llm_request_metrics{request_type="context"} 1
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.5
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"} 800
`,
	"triton": `# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count 3
# TYPE nv_inference_exec_count counter
nv_inference_exec_count 9
`,
}

// TestDefaultFamiliesAreWhatTheExtractorReads runs upstream's core-metrics-extractor,
// with its default configuration, on each engine's page and on the share of it (the
// DefaultFamilies kept): the endpoint's metrics come out the same, so a peer fed by
// shares routes on what it would have read itself. A family the extractor reads
// and DefaultFamilies lacks makes them differ.
func TestDefaultFamiliesAreWhatTheExtractorReads(t *testing.T) {
	keep := map[string]bool{}
	for _, f := range DefaultFamilies {
		keep[f] = true
	}
	ext, err := extractormetrics.CoreMetricsExtractorFactory("core-metrics-extractor", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	extract := func(engine string, fams sourcemetrics.PrometheusMetricMap) *fwkdl.Metrics {
		ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{Labels: map[string]string{extractormetrics.DefaultEngineTypeLabelKey: engine}}, nil)
		if err := ext.(*extractormetrics.Extractor).Extract(context.Background(), fwkdl.PollInput[sourcemetrics.PrometheusMetricMap]{Payload: fams, Endpoint: ep}); err != nil {
			t.Fatalf("%s: %v", engine, err)
		}
		m := ep.GetMetrics().Clone()
		m.UpdateTime = time.Time{} // when it ran, not what it read
		return m
	}
	for engine, page := range enginePages {
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(page + decoys))
		if err != nil {
			t.Fatalf("%s: %v", engine, err)
		}
		full, shared := extract(engine, fams), extract(engine, filter(fams, keep))
		if full.WaitingQueueSize == 0 || full.RunningRequestsSize == 0 {
			t.Errorf("%s: the extractor read nothing from the page (waiting %d, running %d): the page does not test it", engine, full.WaitingQueueSize, full.RunningRequestsSize)
		}
		if fs, ss := full.String(), shared.String(); fs != ss {
			t.Errorf("%s: from the page %s, from the share %s", engine, fs, ss)
		}
	}
}
