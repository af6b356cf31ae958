// Command docpkgs checks docs/ARCHITECTURE.md's package table against the tree:
// every Go package below the folders given (a folder with a .go file that is not a
// test) must be in the table's first column, and every package the column names
// must exist. A cell names packages in backquotes: a path, `a/{b,c}` for a/b and
// a/c, or `a/*` for every package below a. `make verify-architecture` (part of `make
// lint`) runs it, so that a package added without its line in the table fails.
//
//	docpkgs -doc docs/ARCHITECTURE.md controller internal llmdrouter hack
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// section is the heading of the table in the doc.
const section = "## Packages and modules"

func main() {
	doc := flag.String("doc", "docs/ARCHITECTURE.md", "the page with the package table")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: docpkgs -doc PAGE.md FOLDER...")
		os.Exit(2)
	}
	problems, err := check(*doc, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "docpkgs:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Println("docpkgs:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// check returns what differs between the doc's table and the packages below roots.
func check(doc string, roots []string) ([]string, error) {
	text, err := os.ReadFile(doc)
	if err != nil {
		return nil, err
	}
	exact, wild, err := named(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", doc, err)
	}
	var pkgs []string
	for _, root := range roots {
		found, err := packages(root)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, found...)
	}
	var problems []string
	for _, p := range pkgs {
		if exact[p] || slices.ContainsFunc(wild, func(w string) bool { return strings.HasPrefix(p, w+"/") }) {
			continue
		}
		problems = append(problems, fmt.Sprintf("package %s is not in %s's table (%q): add its line, with its one job", p, doc, section))
	}
	for p := range exact {
		if !slices.Contains(pkgs, p) {
			problems = append(problems, fmt.Sprintf("%s's table names %s, which is no package below %s: fix or remove its line", doc, p, strings.Join(roots, ", ")))
		}
	}
	slices.Sort(problems)
	return problems, nil
}

var code = regexp.MustCompile("`([^`]+)`")

// named reads the packages the table's first column names: exact paths, and the
// folders of the wildcards.
func named(text string) (exact map[string]bool, wild []string, err error) {
	_, table, ok := strings.Cut(text, "\n"+section+"\n")
	if !ok {
		return nil, nil, fmt.Errorf("no heading %q", section)
	}
	if end := strings.Index(table, "\n## "); end >= 0 {
		table = table[:end]
	}
	exact = map[string]bool{}
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			for _, p := range expand(m[1]) {
				if dir, ok := strings.CutSuffix(p, "/*"); ok {
					wild = append(wild, dir)
				} else {
					exact[p] = true
				}
			}
		}
	}
	if len(exact) == 0 {
		return nil, nil, fmt.Errorf("no package in the table under %q", section)
	}
	return exact, wild, nil
}

// expand turns a/{b,c}/d into a/b/d and a/c/d.
func expand(p string) []string {
	open := strings.Index(p, "{")
	shut := strings.Index(p, "}")
	if open < 0 || shut < open {
		return []string{p}
	}
	var out []string
	for alt := range strings.SplitSeq(p[open+1:shut], ",") {
		out = append(out, expand(p[:open]+alt+p[shut+1:])...)
	}
	return out
}

// packages lists the folders below root that hold a Go file other than a test,
// outside testdata.
func packages(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			seen[filepath.ToSlash(filepath.Dir(path))] = true
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, err
}
