// Package modelsim simulates vLLM model servers for the routing benchmark: no GPU, no
// model, but what an Endpoint Picker's routing depends on.
//
//   - The API: OpenAI completions (/v1/completions) and chat completions
//     (/v1/chat/completions), non-streaming, as llm-d-router's openai parser reads
//     them; each response's usage has prompt_tokens, completion_tokens and
//     prompt_tokens_details.cached_tokens.
//   - Tokens: the bytes llm-d-router's tokenizer-free "estimate" backend reads (a
//     completion's prompt; a chat's role and content of every message, in order),
//     packed 4 bytes to a token, the last one zero-padded (see Render and
//     TokenCount). The answer is deterministic pseudo-text, a function of the
//     prompt, exactly max_tokens tokens long (as with ignore_eos).
//   - A prefix KV cache (Cache): fixed-size blocks of BlockTokens tokens whose hashes
//     are chained from the prompt's start, as vLLM's automatic prefix caching keys
//     them; only full blocks are cached; a capacity in blocks; blocks of finished
//     requests stay cached and are evicted least recently used first (a request's
//     tail block before its head, as vLLM frees them). A prompt's hit is the longest
//     cached prefix, in whole blocks, leaving at least one token to compute.
//   - Continuous batching (Server): up to MaxRunning requests run, the others wait
//     in arrival order; a request is admitted when the cache has room for all its
//     blocks (prompt and answer, none preempted later). Each step decodes one
//     token of every running request past its prefill and prefills waiting prompt
//     tokens up to the step's token budget (chunked prefill). A step costs
//     StepBase + StepPerSequence per decoding request + PrefillPerToken per
//     prefilled (uncached) token. A request's first token comes at the end of the
//     step that completes its prefill.
//   - vLLM's Prometheus metrics (see Server.WriteMetrics): by default the page a
//     vLLM v1 server renders (VLLMPage: its default families, histograms with
//     their buckets, about 39 KiB), or only what llm-d-router's
//     core-metrics-extractor maps for its queue, KV-cache and prefix-cache plugins
//     (CorePage), under vLLM's names either way.
//
// Time is simulated: a Clock runs Speedup times faster than the wall clock, so a
// benchmark covers more simulated time than it waits. Every server of a Fleet shares
// one Clock, and its metrics always describe the current simulated state.
//
// The constants (DefaultConfig) are a Llama-3.1-8B-class model on one A100 in vLLM;
// DefaultConfig says where each comes from.
package modelsim
