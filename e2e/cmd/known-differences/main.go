// Command known-differences writes the table of upstreamparity.KnownDifferences (the
// ways our EPP container may differ from llm-d-router's chart's, with their reasons)
// into a markdown file, between upstreamparity.ReadmeBegin and ReadmeEnd: `make docs`
// runs it on charts/epp/README.md.gotmpl.
//
//	go run ./cmd/known-differences <file>
package main

import (
	"fmt"
	"os"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/upstreamparity"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: known-differences <markdown file>")
		os.Exit(2)
	}
	if err := markdown.ReplaceSection(os.Args[1], upstreamparity.ReadmeBegin, upstreamparity.ReadmeEnd, upstreamparity.Markdown()); err != nil {
		fmt.Fprintln(os.Stderr, "known-differences:", err)
		os.Exit(1)
	}
}
