package modelsim

import (
	"errors"
	"fmt"
	"time"
)

// Config is one simulated server.
type Config struct {
	// Model is the served model's name (vLLM's --served-model-name); requests may
	// name any model, the metrics are labelled with this one.
	Model string
	// BlockTokens is the KV cache's block size in tokens (vLLM's --block-size),
	// published as block_size in vllm:cache_config_info.
	BlockTokens int
	// CapacityBlocks is the KV cache's size in blocks (vLLM's num_gpu_blocks).
	CapacityBlocks int
	// MaxRunning is how many requests run at once at most (vLLM's --max-num-seqs).
	MaxRunning int
	// MaxBatchedTokens is a step's token budget: one per decoding request, the rest
	// for prefill (vLLM's --max-num-batched-tokens, with chunked prefill).
	MaxBatchedTokens int
	// StepBase is a step's cost whatever it computes.
	StepBase time.Duration
	// StepPerSequence is what each decoding request adds to a step.
	StepPerSequence time.Duration
	// PrefillPerToken is what each prefilled (uncached) prompt token adds to a step.
	PrefillPerToken time.Duration
	// Page is what /metrics renders (the zero value is VLLMPage).
	Page MetricsPage
}

// MetricsPage is a choice of the families /metrics renders.
type MetricsPage string

const (
	// VLLMPage is a vLLM v1 server's page: every family vLLM registers by
	// default, histograms with their buckets (about 39 KiB; see metrics.go).
	VLLMPage MetricsPage = "vllm"
	// CorePage is the gauges llm-d-router's core-metrics-extractor reads and the
	// counters of tokens and requests, with vLLM's names and labels (under 2 KiB):
	// for benches whose replicas would otherwise spend the machine's cores parsing
	// pages rather than routing (DECISIONS: "The model servers' metrics page").
	CorePage MetricsPage = "core"
)

// DefaultConfig is a Llama-3.1-8B-class model (BF16) served by vLLM on one NVIDIA
// A100 40GB, with the block size llm-d-router's prefix index uses:
//
//   - BlockTokens 64: llm-d-router's approximate prefix index never uses blocks
//     smaller than 64 tokens (its minBlockSizeTokens, llm-d-router #1158); with its
//     default autoTune it reads block_size and num_gpu_blocks from this server's
//     vllm:cache_config_info, so with 64 the index and the server count the same
//     blocks (vLLM's own default is 16).
//   - CapacityBlocks 2,048 (131,072 tokens): Llama-3.1-8B's KV cache takes 128 KiB
//     per token (32 layers × 8 KV heads × 128 dimensions × K and V × 2 bytes); an
//     A100 40GB at vLLM's default gpu_memory_utilization 0.9 has about 36 GiB, of
//     which the weights take 16 GB and activations a few: about 130,000 tokens.
//   - MaxRunning 256 and MaxBatchedTokens 2,048: vLLM's defaults for its OpenAI
//     server on a GPU of less than 70 GiB (max_num_seqs, max_num_batched_tokens).
//   - StepBase 13 ms and StepPerSequence 0.4 ms: measured decoding of
//     Llama-3.1-8B-Instruct on one A100 40GB with vLLM 0.23 (John Musgrave,
//     "vLLM throughput-latency sweep on NVIDIA A100", 1,024-token prompts, 128-token
//     answers): about 75 tokens/s with one request (13.3 ms a step), and 6.6 times
//     the throughput with 8 at almost no latency cost (16 ms a step).
//   - PrefillPerToken 80 µs: prefill is compute-bound; 2 FLOP per parameter per
//     token (16 GFLOP) at about 65% of the A100's 312 TFLOPS (BF16) is about 12,500
//     tokens/s.
func DefaultConfig() Config {
	return Config{
		Model:            "sim/llama-3.1-8b-instruct",
		BlockTokens:      64,
		CapacityBlocks:   2048,
		MaxRunning:       256,
		MaxBatchedTokens: 2048,
		StepBase:         13 * time.Millisecond,
		StepPerSequence:  400 * time.Microsecond,
		PrefillPerToken:  80 * time.Microsecond,
	}
}

// ContextTokens is the longest request the server takes, prompt and answer, in
// tokens: its KV cache's size (vLLM's max_model_len, which the buckets of its
// request-length histograms go up to; 131,072 for Llama-3.1-8B).
func (c Config) ContextTokens() int { return c.CapacityBlocks * c.BlockTokens }

// Validate reports the first field out of range.
func (c Config) Validate() error {
	var errs []error
	check := func(name string, v, least int) {
		if v < least {
			errs = append(errs, fmt.Errorf("%s: %d, want at least %d", name, v, least))
		}
	}
	check("block tokens", c.BlockTokens, 1)
	check("capacity in blocks", c.CapacityBlocks, 1)
	check("max running", c.MaxRunning, 1)
	check("max batched tokens", c.MaxBatchedTokens, 1)
	if c.StepBase <= 0 || c.StepPerSequence < 0 || c.PrefillPerToken < 0 {
		errs = append(errs, errors.New("step costs: want a positive base and no negative cost"))
	}
	if c.Page != "" && c.Page != VLLMPage && c.Page != CorePage {
		errs = append(errs, fmt.Errorf("metrics page: %q, want %q or %q", c.Page, VLLMPage, CorePage))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("model: want a name"))
	}
	return errors.Join(errs...)
}
