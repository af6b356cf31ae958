package fleetmetrics

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const vllmPage = `# HELP vllm:num_requests_waiting Requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_running Requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# HELP vllm:kv_cache_usage_perc KV usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:cache_config_info Cache config.
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4096"} 1.0
# HELP vllm:e2e_request_latency_seconds Latency.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 1.5
# HELP vllm:prompt_tokens_total Prompt tokens.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
`

// TestAShareCarriesTheKeptFamiliesAsTheyWere: a share holds the server, the time
// it was read and the families kept, which parse on the other side as they were on
// the page; the others are left out.
func TestAShareCarriesTheKeptFamiliesAsTheyWere(t *testing.T) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(vllmPage))
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for _, f := range DefaultFamilies {
		keep[f] = true
	}
	at := time.UnixMicro(time.Now().UnixMicro())
	msg, err := encodeShare(share{server: "llm/vllm-0-rank-0", scrapedAt: at, families: filter(fams, keep)})
	if err != nil {
		t.Fatal(err)
	}
	if msg[0] != kindShare {
		t.Fatalf("kind %d", msg[0])
	}
	got, err := decodeShare(msg[1:], keep)
	if err != nil {
		t.Fatal(err)
	}
	if got.server != "llm/vllm-0-rank-0" || !got.scrapedAt.Equal(at) || len(got.families) != 4 {
		t.Fatalf("decoded %s at %v with %d families, want the server, %v and the 4 kept", got.server, got.scrapedAt, len(got.families), at)
	}
	for name, f := range got.families {
		var a, b bytes.Buffer
		_, _ = expfmt.MetricFamilyToText(&a, f)
		_, _ = expfmt.MetricFamilyToText(&b, fams[name])
		if a.String() != b.String() {
			t.Errorf("%s arrived as\n%s\nwant\n%s", name, a.String(), b.String())
		}
	}
	t.Logf("a share of vLLM's core families is %d bytes", len(msg))
}

// TestMalformedSharesAreRefused: what does not parse is an error of errShare, never
// a panic, and a page larger than a share may be is not published.
func TestMalformedSharesAreRefused(t *testing.T) {
	keep := map[string]bool{"vllm:num_requests_waiting": true}
	good, err := encodeShare(share{server: "llm/s", scrapedAt: time.Now(), families: nil})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"empty":             {},
		"no name":           {0},
		"name over bound":   {0xff, 0x7f},
		"name past the end": {10, 'a'},
		"no time":           good[1 : 2+len("llm/s")], // the name alone
		"bad text":          append(append([]byte{}, good[1:]...), []byte("vllm:x{ 1\n")...),
	} {
		if _, err := decodeShare(body, keep); !errors.Is(err, errShare) {
			t.Errorf("%s: %v, want errShare", name, err)
		}
	}
	var big strings.Builder
	big.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i := range 2000 {
		big.WriteString("vllm:num_requests_waiting{pod=\"" + strings.Repeat("x", 20) + string(rune('a'+i%26)) + "\",i=\"" + strings.Repeat("y", i%7) + "\"} 1\n")
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(big.String()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encodeShare(share{server: "llm/s", scrapedAt: time.Now(), families: fams}); err == nil {
		t.Error("a share over MaxShareBytes was encoded")
	}
}

// FuzzDecodeShare: no input panics the decoder, and what it accepts is bounded.
func FuzzDecodeShare(f *testing.F) {
	good, _ := encodeShare(share{server: "llm/s", scrapedAt: time.Now()})
	f.Add(good[1:])
	f.Add([]byte(vllmPage))
	keep := map[string]bool{"vllm:num_requests_waiting": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := decodeShare(body, keep)
		if err == nil && (len(s.server) > maxServerName || len(s.families) > len(keep)) {
			t.Fatalf("accepted a server of %d bytes and %d families", len(s.server), len(s.families))
		}
	})
}
