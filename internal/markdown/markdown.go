// Package markdown writes the benchmarks' figures into the project's markdown docs
// (numbers as the docs print them, the line that says where and when they were
// measured, and a generated section between two markers),
// and reads the code blocks of a doc, for tests that compile or run what the docs
// show.
package markdown

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Measured is how a benchmark's generated section begins: the day (UTC), the
// machine's cores, the Go version and platform, and what ran it, e.g.
// Measured("`make bench-sync`") is "Measured 2026-12-06 on 2 cores (go1.26.8,
// linux/amd64) by `make bench-sync`".
func Measured(by string) string {
	return fmt.Sprintf("Measured %s on %d cores (%s, %s/%s) by %s", time.Now().UTC().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, by)
}

// Thousands is n with commas between groups of three digits: 1,234,567.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	start := 0
	if n < 0 {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ReplaceSection puts text between the markers begin and end of the markdown file
// at path, in place of what was there.
func ReplaceSection(path, begin, end, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s, err := WithSection(string(b), begin, end, text)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// WithSection is doc with text between the markers begin and end, in place of what
// was there (text ends with a newline, so that end stays on a line of its own).
func WithSection(doc, begin, end, text string) (string, error) {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no section between %q and %q", begin, end)
	}
	return doc[:i+len(begin)] + "\n" + text + doc[j:], nil
}

// CodeBlocks returns the contents of the fenced code blocks of doc (```lang ... ```)
// whose info string is lang, in order.
func CodeBlocks(doc, lang string) []string {
	var blocks []string
	var cur *strings.Builder
	for line := range strings.Lines(doc) {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```") && strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) == lang:
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return blocks
}
