package modelsim

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
)

// BytesPerToken is how many bytes of text make a token: llm-d-router's "estimate"
// tokenizer backend packs 4 bytes into each pseudo-token, the last one zero-padded.
const BytesPerToken = 4

// AssistantRole is what a chat answer starts with in the token stream: the role of
// the message that carries it on the conversation's next turn.
const AssistantRole = "assistant"

// Message is a chat message with text content.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is the part of an OpenAI completions or chat-completions request body the
// simulator reads: Prompt for completions, Messages for chat.
type Request struct {
	Model               string    `json:"model"`
	Prompt              *string   `json:"prompt,omitempty"`
	Messages            []Message `json:"messages,omitempty"`
	MaxTokens           *int      `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int      `json:"max_completion_tokens,omitempty"`
	Stream              bool      `json:"stream,omitempty"`
}

// DefaultMaxTokens is the answer's length when a request sets no max_tokens.
const DefaultMaxTokens = 16

// ParseRequest reads a request body; chat says which API it came to. The error
// names what is wrong.
func ParseRequest(body []byte, chat bool) (Request, error) {
	var r Request
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("request body: %w", err)
	}
	switch {
	case r.Stream:
		return r, errors.New("stream: true is not simulated; send stream: false")
	case chat && len(r.Messages) == 0:
		return r, errors.New("messages: want at least one message")
	case !chat && r.Prompt == nil:
		return r, errors.New("prompt: want a string")
	}
	if n := r.OutputTokens(); n < 1 {
		return r, fmt.Errorf("max_tokens: %d, want at least 1", n)
	}
	return r, nil
}

// OutputTokens is how many tokens the answer has: max_completion_tokens, else
// max_tokens, else DefaultMaxTokens.
func (r Request) OutputTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return DefaultMaxTokens
}

// Chat reports whether r is a chat request.
func (r Request) Chat() bool { return r.Prompt == nil }

// Render is the text of r's prompt as the "estimate" tokenizer reads it: a
// completion's prompt, or every chat message's role followed by its content.
func (r Request) Render() []byte {
	if r.Prompt != nil {
		return []byte(*r.Prompt)
	}
	var out []byte
	for _, m := range r.Messages {
		out = append(out, m.Role...)
		out = append(out, m.Content...)
	}
	return out
}

// TokenCount is how many tokens text is: one per BytesPerToken bytes, the last one
// padded.
func TokenCount(text []byte) int { return (len(text) + BytesPerToken - 1) / BytesPerToken }

// align pads text with zero bytes to a whole number of tokens.
func align(text []byte) []byte {
	if r := len(text) % BytesPerToken; r != 0 {
		text = append(text, make([]byte, BytesPerToken-r)...)
	}
	return text
}

// BlockHashes are the hashes of text's full blocks of blockTokens tokens: each
// block's hash covers its bytes and the hash of the block before it, so a hash
// names the whole prefix up to the end of its block. A trailing partial block has
// none.
func BlockHashes(text []byte, blockTokens int) []uint64 {
	text = align(text)
	blockBytes := blockTokens * BytesPerToken
	n := len(text) / blockBytes
	out := make([]uint64, n)
	var prev [8]byte
	binary.LittleEndian.PutUint64(prev[:], hashSeed)
	for i := range n {
		h := fnv.New64a()
		_, _ = h.Write(prev[:])
		_, _ = h.Write(text[i*blockBytes : (i+1)*blockBytes])
		out[i] = h.Sum64()
		binary.LittleEndian.PutUint64(prev[:], out[i])
	}
	return out
}

// hashSeed starts every chain (vLLM's NONE_HASH).
const hashSeed = 0x6d6f64656c73696d // "modelsim"

// Continuation is what the answer adds to the token stream after the prompt: for
// chat, the assistant role and the answer text; for a completion, the text. It is
// exactly tokens tokens long (for chat, at least the role's length) and depends
// only on the prompt, so that a conversation's turns are the same whichever server
// answers them.
func Continuation(prompt []byte, tokens int, chat bool) (continuation, text []byte) {
	n := tokens * BytesPerToken
	prefix := ""
	if chat {
		prefix = AssistantRole
	}
	textLen := max(0, n-len(prefix))
	h := fnv.New64a()
	_, _ = h.Write(prompt)
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(tokens))) //nolint:gosec // pseudo-text, not a secret
	text = Words(rng, textLen)
	return append([]byte(prefix), text...), text
}

// Tokens is a request as a server's KV cache sees it.
type Tokens struct {
	// Prompt and Output count the prompt's and the answer's tokens.
	Prompt, Output int
	// PromptBlocks are the hashes of the prompt's full blocks; SequenceBlocks
	// those of the prompt followed by the answer.
	PromptBlocks, SequenceBlocks []uint64
	// Answer is the answer's text (for chat, the assistant message's content).
	Answer []byte
	// BlockTokens is the block size the hashes are of.
	BlockTokens int
}

// Tokenize is req as a cache of blocks of blockTokens tokens sees it, with the
// answer the simulator gives it.
func Tokenize(req Request, blockTokens int) Tokens {
	prompt := req.Render()
	out := req.OutputTokens()
	cont, text := Continuation(prompt, out, req.Chat())
	return Tokens{
		Prompt:         TokenCount(prompt),
		Output:         out,
		PromptBlocks:   BlockHashes(prompt, blockTokens),
		SequenceBlocks: BlockHashes(append(align(slices.Clone(prompt)), cont...), blockTokens),
		Answer:         text,
		BlockTokens:    blockTokens,
	}
}

// Blocks is how many blocks the request holds while it runs: its prompt's and
// its answer's.
func (t Tokens) Blocks() int { return (t.Prompt + t.Output + t.BlockTokens - 1) / t.BlockTokens }

// MaxHit is the most blocks of the prompt a cache hit may cover: at least one
// token is computed (as in vLLM, which needs the last prompt token's logits).
func (t Tokens) MaxHit() int { return (t.Prompt - 1) / t.BlockTokens }

// Words is n bytes of lowercase pseudo-words separated by spaces, drawn from rng.
func Words(rng *rand.Rand, n int) []byte {
	out := make([]byte, n)
	word := 0
	for i := range out {
		if word > 2 && (rng.IntN(6) == 0 || word > 9) && i < n-1 {
			out[i] = ' '
			word = 0
			continue
		}
		out[i] = byte('a' + rng.IntN(26))
		word++
	}
	return out
}
