// Command docstamp checks the sections the benchmarks generate in the project's
// pages (markdown.BenchSections): each must carry the stamp its benchmark wrote
// (markdown.Stamp), and its body must hash to the stamp's hash. A section edited by
// hand, or without a stamp, fails it. A section whose measured code
// (markdown.MeasuredCode) changed since its commit is reported, without failing:
// its figures are from older code until its benchmark runs again. `make
// verify-generated` (part of `make lint`) runs it:
//
//	docstamp README.md docs/*.md
//
// With -adopt, it stamps the sections that have no stamp yet from the history:
// the commit that last changed the section's body, as the commit it measured
// (the benchmark ran on that commit's code or older), and the build as
// unrecorded. It changes no figure; the next run of the benchmark stamps it anew.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
)

func main() {
	adopt := flag.Bool("adopt", false, "stamp the sections without a stamp from the git history (the commit that last changed each one's body)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: docstamp [-adopt] PAGE.md...")
		os.Exit(2)
	}
	failed := false
	for _, page := range flag.Args() {
		ok, err := check(page, *adopt)
		if err != nil {
			fmt.Fprintln(os.Stderr, "docstamp:", err)
			os.Exit(1)
		}
		failed = failed || !ok
	}
	if failed {
		os.Exit(1)
	}
}

// check checks page's sections, reporting on stdout; it returns false when one
// fails.
func check(page string, adopt bool) (bool, error) {
	b, err := os.ReadFile(page)
	if err != nil {
		return false, err
	}
	ok := true
	for _, sec := range markdown.BenchSections(string(b)) {
		switch {
		case !sec.Stamped && adopt:
			s, err := adopted(page, sec)
			if err != nil {
				return false, err
			}
			if err := markdown.ReplaceStamped(page, sec.Begin, "<!-- "+sec.Name+":end -->", sec.Body, s); err != nil {
				return false, err
			}
			fmt.Printf("docstamp: %s: %s stamped as written by %s (build unrecorded)\n", page, sec.Name, s.Commit[:12])
		case !sec.Stamped:
			fmt.Printf("docstamp: %s: the section %s has no stamp: run its benchmark (its begin marker names it) to write it with one\n", page, sec.Name)
			ok = false
		case sec.Edited:
			fmt.Printf("docstamp: %s: the section %s is not what its benchmark wrote (its body does not match the stamp's hash): run the benchmark again rather than edit it\n", page, sec.Name)
			ok = false
		default:
			if msg := staleness(sec.Stamp); msg != "" {
				fmt.Printf("docstamp: %s: %s %s\n", page, sec.Name, msg)
			}
		}
	}
	return ok, nil
}

// staleness says how the measured code moved since s's commit, or "" when it did
// not.
func staleness(s markdown.Stamp) string {
	var notes []string
	if s.Dirty {
		notes = append(notes, "was measured with uncommitted changes to the measured code")
	}
	if s.Commit == "" {
		return strings.Join(append(notes, "names no commit"), "; ")
	}
	args := append([]string{"log", "--format=%h", s.Commit + "..HEAD", "--"}, markdown.MeasuredPathspec()...)
	out, err := exec.Command("git", args...).Output()
	switch {
	case err != nil:
		notes = append(notes, fmt.Sprintf("measured %s, a commit this clone does not have: cannot tell whether it is stale", s.Commit[:12]))
	case len(strings.Fields(string(out))) > 0:
		notes = append(notes, fmt.Sprintf("measured %s; %d commits since changed %s: stale until its benchmark runs again (not an error)",
			s.Commit[:12], len(strings.Fields(string(out))), strings.Join(markdown.MeasuredCode, " or ")+" (tests aside)"))
	}
	return strings.Join(notes, "; ")
}

// adopted is the stamp of a section from the history: the newest commit whose
// parent's page had another body in the section.
func adopted(page string, sec markdown.Section) (markdown.Stamp, error) {
	out, err := exec.Command("git", "log", "--format=%H", "--", page).Output()
	if err != nil {
		return markdown.Stamp{}, fmt.Errorf("git log %s: %w", page, err)
	}
	commits := strings.Fields(string(out))
	for i, c := range commits {
		if i+1 < len(commits) && bodyAt(commits[i+1], page, sec.Name) == sec.Body {
			continue
		}
		if bodyAt(c, page, sec.Name) != sec.Body {
			return markdown.Stamp{}, fmt.Errorf("%s: the section %s differs from every committed version: commit it, or run its benchmark", page, sec.Name)
		}
		return markdown.Stamp{Commit: c, Build: "unrecorded"}, nil
	}
	return markdown.Stamp{}, fmt.Errorf("%s: no commit holds the section %s", page, sec.Name)
}

// bodyAt is the body of the section name in page at commit c ("" when absent).
func bodyAt(c, page, name string) string {
	b, err := exec.Command("git", "show", c+":"+page).Output()
	if err != nil {
		return ""
	}
	for _, s := range markdown.BenchSections(string(b)) {
		if s.Name == name {
			return s.Body
		}
	}
	return ""
}
