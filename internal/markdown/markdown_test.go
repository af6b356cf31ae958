package markdown

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 145000: "145,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("# Doc\n<!-- b -->\nold\n<!-- e -->\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceSection(path, "<!-- b -->", "<!-- e -->", "new\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "# Doc\n<!-- b -->\nnew\n<!-- e -->\nafter\n"; string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
	if err := ReplaceSection(path, "<!-- x -->", "<!-- e -->", "new\n"); err == nil {
		t.Error("no error for a file without the section")
	}
}

func TestCodeBlocks(t *testing.T) {
	doc := "# Doc\n```go\npackage main\n\nfunc main() {}\n```\ntext\n```sh\nmake\n```\n```go\nx := 1\n```\n"
	got := CodeBlocks(doc, "go")
	if len(got) != 2 || got[0] != "package main\n\nfunc main() {}\n" || got[1] != "x := 1\n" {
		t.Errorf("CodeBlocks(go) = %q", got)
	}
	if got := CodeBlocks(doc, "yaml"); len(got) != 0 {
		t.Errorf("CodeBlocks(yaml) = %q, want none", got)
	}
}

func TestMeasured(t *testing.T) {
	got := Measured("`make bench-sync`")
	want := regexp.MustCompile("^Measured [0-9]{4}-[0-9]{2}-[0-9]{2} on [0-9]+ cores \\(go[^,]+, [a-z0-9]+/[a-z0-9]+\\) by `make bench-sync`$")
	if !want.MatchString(got) {
		t.Errorf("Measured: %q, want the day, the cores, Go and the platform, then what ran it", got)
	}
}
