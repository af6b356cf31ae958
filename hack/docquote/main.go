// Command docquote checks that the pages that quote a generated paragraph quote it
// as generated: the text between the markers <!-- NAME:begin ... --> and
// <!-- NAME:end --> of each page must be the text between them in the source page,
// where the benchmark that measured its figures wrote it. `make verify-quotes`
// (part of `make lint`) runs it for the routing bench's headline, which
// docs/PERFORMANCE.md holds and README.md and docs/SHARING-STATE.md quote: a figure
// typed by hand, or left from an earlier run, fails it.
//
//	docquote -source docs/PERFORMANCE.md -marker routing-headline README.md docs/SHARING-STATE.md
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	source := flag.String("source", "", "the page the benchmark writes the paragraph into")
	marker := flag.String("marker", "", "the markers' name: <!-- NAME:begin ... --> and <!-- NAME:end -->")
	flag.Parse()
	if *source == "" || *marker == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: docquote -source PAGE.md -marker NAME PAGE.md...")
		os.Exit(2)
	}
	want, err := quoted(*source, *marker)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docquote:", err)
		os.Exit(1)
	}
	failed := false
	for _, page := range flag.Args() {
		got, err := quoted(page, *marker)
		switch {
		case err != nil:
			fmt.Println("docquote:", err)
			failed = true
		case got != want:
			fmt.Printf("docquote: %s quotes %q differently from %s (where `make bench-routing` wrote it): copy it from there\n", page, *marker, *source)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// quoted is the text between page's markers of name.
func quoted(page, name string) (string, error) {
	b, err := os.ReadFile(page)
	if err != nil {
		return "", err
	}
	doc := string(b)
	begin, end := "<!-- "+name+":begin", "<!-- "+name+":end -->"
	i := strings.Index(doc, begin)
	if i < 0 {
		return "", fmt.Errorf("%s has no %s... marker", page, begin)
	}
	nl := strings.Index(doc[i:], "-->")
	if nl < 0 {
		return "", fmt.Errorf("%s: %s is not closed", page, begin)
	}
	rest := doc[i+nl+len("-->"):]
	j := strings.Index(rest, end)
	if j < 0 {
		return "", fmt.Errorf("%s has %s but no %s", page, begin, end)
	}
	return strings.TrimSpace(rest[:j]), nil
}
