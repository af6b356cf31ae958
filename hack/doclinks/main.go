// Command doclinks checks the links of Markdown files: every relative link must name
// a file or folder of the repository, and every #anchor a heading of the page it
// points into (GitHub's anchors: lower case, punctuation dropped, spaces as
// hyphens, -1, -2, ... for repeated headings). Links to other sites are not
// followed. `make verify-links` (part of `make lint`) runs it on README.md and
// docs/*.md; it prints one line per broken link and fails when there is one.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: doclinks FILE.md...")
		os.Exit(2)
	}
	broken := 0
	for _, file := range os.Args[1:] {
		problems, err := check(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doclinks:", err)
			os.Exit(1)
		}
		for _, p := range problems {
			fmt.Println(p)
		}
		broken += len(problems)
	}
	if broken > 0 {
		fmt.Printf("doclinks: %d broken links\n", broken)
		os.Exit(1)
	}
}

// link matches [text](target) and ![alt](target); the target ends at a space or ).
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// check returns one line per broken link of file.
func check(file string) ([]string, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var problems []string
	for n, line := range proseLines(string(text)) {
		for _, m := range link.FindAllStringSubmatch(stripCode(line), -1) {
			target := strings.ReplaceAll(m[1], `\_`, "_") // Markdown's escape, as terraform-docs writes anchors
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: no such file", file, n+1, target))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			anchors, err := anchorsOf(dest)
			if err != nil {
				return nil, err
			}
			if !anchors[anchor] {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: no heading with anchor #%s in %s", file, n+1, target, anchor, dest))
			}
		}
	}
	return problems, nil
}

// proseLines are the lines of a Markdown text, those of fenced code blocks blanked
// (so that line numbers stay right).
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// stripCode drops inline code spans from a line, except inside a link's text.
func stripCode(line string) string {
	return inlineCode.ReplaceAllStringFunc(line, func(s string) string {
		if strings.Contains(s, "](") {
			return ""
		}
		return strings.Trim(s, "`")
	})
}

// anchorsOf returns the anchors GitHub gives the headings of a Markdown file.
func anchorsOf(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(string(text)) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(title)
		if k := seen[a]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	// Explicit anchors: <a id="x"></a> or <a name="x"></a>.
	for _, m := range regexp.MustCompile(`<a (?:id|name)="([^"]+)"`).FindAllStringSubmatch(string(text), -1) {
		anchors[m[1]] = true
	}
	return anchors, nil
}

// slug is GitHub's anchor of a heading's text.
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
