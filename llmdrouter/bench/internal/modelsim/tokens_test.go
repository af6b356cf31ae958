package modelsim

import (
	"bytes"
	"slices"
	"testing"
)

func TestBlockHashesChainFromThePromptStart(t *testing.T) {
	const block = 4 // tokens: 16 bytes
	a := bytes.Repeat([]byte("abcdefghijklmnop"), 3)
	ha := BlockHashes(a, block)
	if len(ha) != 3 {
		t.Fatalf("%d hashes of 3 full blocks", len(ha))
	}
	// A partial tail block has no hash.
	if got := BlockHashes(append(slices.Clone(a), "xyz"...), block); !slices.Equal(got, ha) {
		t.Errorf("a partial tail changed the full blocks' hashes: %v, want %v", got, ha)
	}
	// The same bytes after a different first block hash differently: a hash names
	// its whole prefix.
	b := slices.Clone(a)
	b[0] = 'X'
	hb := BlockHashes(b, block)
	for i := range hb {
		if hb[i] == ha[i] {
			t.Errorf("block %d: same hash after a different first block", i)
		}
	}
	// A prompt that extends another keeps its blocks' hashes.
	if got := BlockHashes(append(slices.Clone(a), a...), block); !slices.Equal(got[:3], ha) {
		t.Errorf("an extended prompt's first blocks hash %v, want %v", got[:3], ha)
	}
}

func TestTokensAsTheEstimateTokenizerCountsThem(t *testing.T) {
	for text, want := range map[string]int{"": 0, "a": 1, "abcd": 1, "abcde": 2, "12345678": 2} {
		if got := TokenCount([]byte(text)); got != want {
			t.Errorf("TokenCount(%q) = %d, want %d", text, got, want)
		}
	}
	prompt := "once upon"
	chat := Request{Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}}
	if got := string(chat.Render()); got != "systembe briefuserhi" {
		t.Errorf("chat renders as %q, want the roles and contents in order", got)
	}
	if got := string((Request{Prompt: &prompt}).Render()); got != prompt {
		t.Errorf("completion renders as %q", got)
	}
}

func TestContinuationIsExactlyTheAnswerTokensAndDeterministic(t *testing.T) {
	prompt := []byte("systemyou are a helpful assistantuserwhat is a block")
	cont, text := Continuation(prompt, 20, true)
	if len(cont) != 20*BytesPerToken || !bytes.HasPrefix(cont, []byte(AssistantRole)) || !bytes.HasSuffix(cont, text) {
		t.Fatalf("chat continuation of 20 tokens: %d bytes %q", len(cont), cont)
	}
	again, _ := Continuation(prompt, 20, true)
	if !bytes.Equal(cont, again) {
		t.Error("the same prompt gave another answer")
	}
	other, _ := Continuation(append(slices.Clone(prompt), '!'), 20, true)
	if bytes.Equal(cont, other) {
		t.Error("another prompt gave the same answer")
	}
	if c, _ := Continuation(prompt, 7, false); len(c) != 7*BytesPerToken {
		t.Errorf("completion continuation of 7 tokens: %d bytes", len(c))
	}
}

func TestParseRequestErrorsNameTheField(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m"}`: "prompt",
		`{"model":"m","prompt":"x","max_tokens":0}`: "max_tokens",
		`{"model":"m","prompt":"x","stream":true}`:  "stream",
		`not json`: "request body",
		`{"model":"m","messages":[],"max_tokens":3}`:           "messages",
		`{"model":"m","prompt":"x","max_tokens":5}`:            "",
		`{"model":"m","prompt":"x","max_completion_tokens":5}`: "",
	} {
		chat := bytes.Contains([]byte(body), []byte("messages"))
		_, err := ParseRequest([]byte(body), chat)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(want))):
			t.Errorf("%s: error %v, want one naming %s", body, err, want)
		}
	}
}
