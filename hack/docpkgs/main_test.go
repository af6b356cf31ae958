package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, f := range []string{"lib/a/a.go", "lib/b/b.go", "lib/b/testdata/x.go", "lib/c/c_test.go", "lib/t/x/x.go", "lib/t/y/y.go", "lib/new/new.go"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := "# A\n\n" + section + "\n\n| package | one job |\n|---|---|\n| `lib/{a,b}` | two |\n| `lib/t/*` | tests |\n| `lib/gone` | removed |\n\n## Next\n\n| `lib/new` | not the table |\n"
	if err := os.WriteFile("A.md", []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := check("A.md", []string{"lib"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A.md's table names lib/gone", "package lib/new is not in A.md's table"}
	if len(got) != len(want) || !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want[0]) }) ||
		!slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want[1]) }) {
		t.Fatalf("problems:\n%s\nwant one starting with each of %q", strings.Join(got, "\n"), want)
	}
}
