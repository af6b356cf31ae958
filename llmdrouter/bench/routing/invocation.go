package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// makeInvocation is the command that a report names as its source: `make target`
// with the flags this run was given beyond those the target passes itself (in
// targetFlags: the EPP build and the outputs), as the Makefile variable that adds
// flags. So a section written by a run with other flags says which, and one
// written by the target itself says just `make target`.
func makeInvocation(target, variable string, fs *flag.FlagSet, targetFlags ...string) string {
	var extra []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(targetFlags, f.Name) {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && f.Value.String() == "true" {
			extra = append(extra, "--"+f.Name)
			return
		}
		extra = append(extra, fmt.Sprintf("--%s=%s", f.Name, f.Value))
	})
	if len(extra) == 0 {
		return "`make " + target + "`"
	}
	return fmt.Sprintf("`make %s %s='%s'`", target, variable, strings.Join(extra, " "))
}

// eppName is how a report names the EPP build it measured: bin/<name> for a build
// in a bin directory (make build-llmd's bin/epp-llmd), else the path given.
func eppName(path string) string {
	if filepath.Base(filepath.Dir(path)) == "bin" {
		return "bin/" + filepath.Base(path)
	}
	return path
}
