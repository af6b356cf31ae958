package integration_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

const (
	rootModule   = "github.com/epp-peer-discovery/epp-peer-discovery"
	nestedModule = rootModule + "/llmdrouter"
	upstreamMod  = "github.com/llm-d/llm-d-router"
)

// gitEnv is the environment of the git and make commands on a snapshot: no user or
// system configuration of the machine (signing, hooks), a fixed identity.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GIT_") || name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL" || name == "GOWORK" {
			continue // not the outer make's jobserver, a git setting of the caller's, nor the tree's go.work
		}
		env = append(env, kv)
	}
	return append(env, "GOWORK=off", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@example.com",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@example.com")
}

// run runs name with args in dir with gitEnv, and returns its combined output.
func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func mustRun(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := run(dir, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// snapshot commits the repository's working tree as it is (the files git tracks
// or would add: none it ignores) as the one commit of a new repository in a
// temporary folder, and returns that folder: what a release of this tree would tag.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	list := mustRun(t, root, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate")
	repo := filepath.Join(t.TempDir(), "repo")
	for name := range strings.SplitSeq(strings.TrimSuffix(list, "\x00"), "\x00") {
		src, dst := filepath.Join(root, name), filepath.Join(repo, name)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, dst)
			}
			if err != nil {
				t.Fatal(err)
			}
		case info.Mode().IsRegular():
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(dst, b, info.Mode().Perm())
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	mustRun(t, repo, "git", "init", "-q", "-b", "main")
	mustRun(t, repo, "git", "add", "-A")
	mustRun(t, repo, "git", "commit", "-q", "-m", "the working tree under test")
	return repo
}

// release runs make release VERSION=version in repo.
func release(repo, version string) (string, error) {
	return run(repo, "make", "--no-print-directory", "release", "VERSION="+version)
}

// tagged is the commit tag names in repo, "" when there is no such tag.
func tagged(t *testing.T, repo, tag string) string {
	t.Helper()
	out, err := run(repo, "git", "rev-parse", "-q", "--verify", "refs/tags/"+tag+"^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// releaseVersion is the version a release of this tree gets: the root module's
// version that llmdrouter/go.mod requires, without its v.
func releaseVersion(t *testing.T, root string) string {
	t.Helper()
	return strings.TrimPrefix(rootVersion(t, root), "v")
}

// TestReleaseTagsBothModules: make release tags the commit for the root module and
// for llmdrouter/ with the version make set-version wrote, annotated and local; a
// second run changes nothing; a new version goes set-version, commit, release.
func TestReleaseTagsBothModules(t *testing.T) {
	root := repoRoot(t)
	repo := snapshot(t, root)
	v := releaseVersion(t, root)
	head := strings.TrimSpace(mustRun(t, repo, "git", "rev-parse", "HEAD"))
	out, err := release(repo, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v" + v, "llmdrouter/v" + v} {
		if got := tagged(t, repo, tag); got != head {
			t.Errorf("tag %s names %q, want HEAD %s\n%s", tag, got, head, out)
		}
		if typ := strings.TrimSpace(mustRun(t, repo, "git", "cat-file", "-t", "refs/tags/"+tag)); typ != "tag" {
			t.Errorf("tag %s is a %s, want an annotated tag", tag, typ)
		}
	}
	if out, err := release(repo, v); err != nil || !strings.Contains(out, "already tag HEAD") {
		t.Errorf("make release again: %v\n%s", err, out)
	}
	if remotes := strings.TrimSpace(mustRun(t, repo, "git", "remote")); remotes != "" {
		t.Fatalf("the snapshot has remotes %q: nothing may be pushed", remotes)
	}

	// The next version: set-version's files (its make docs needs helm-docs, which the
	// chart tests cover), committed, then the release; the old tags stay.
	next := "1.99.0"
	if next == v {
		next = "1.98.0"
	}
	mustRun(t, repo, "hack/release.sh", "set", next)
	mustRun(t, repo, "git", "commit", "-q", "-am", "version "+next)
	if out, err := release(repo, next); err != nil {
		t.Fatalf("make release VERSION=%s after set-version: %v\n%s", next, err, out)
	}
	newHead := strings.TrimSpace(mustRun(t, repo, "git", "rev-parse", "HEAD"))
	for tag, want := range map[string]string{"v" + next: newHead, "llmdrouter/v" + next: newHead, "v" + v: head, "llmdrouter/v" + v: head} {
		if got := tagged(t, repo, tag); got != want {
			t.Errorf("tag %s names %q, want %s", tag, got, want)
		}
	}
}

// TestReleaseRefuses: make release tags nothing, and says why in one line, for a
// working tree with changes, a version that set-version did not write everywhere
// (llmdrouter/go.mod's requirement of the root module included), a tag of that
// version on another commit, and a version that is not x.y.z.
func TestReleaseRefuses(t *testing.T) {
	root := repoRoot(t)
	v := releaseVersion(t, root)
	tests := []struct {
		name    string
		prepare func(t *testing.T, repo string)
		version string
		want    string
		kept    []string // tags that existed before and stay
	}{
		{"a tracked file changed", func(t *testing.T, repo string) {
			appendTo(t, filepath.Join(repo, "README.md"), "\nan edit\n")
		}, v, "the working tree has changes", nil},
		{"a file not added", func(t *testing.T, repo string) {
			appendTo(t, filepath.Join(repo, "llmdrouter", "new.go"), "package llmdrouter\n")
		}, v, "the working tree has changes", nil},
		{"a version set-version did not write", nil, "0.99.0",
			"charts/epp/Chart.yaml appVersion is " + v, nil},
		{"llmdrouter/ requires another release of the root module", func(t *testing.T, repo string) {
			mustRun(t, filepath.Join(repo, "llmdrouter"), "go", "mod", "edit", "-require="+rootModule+"@v0.0.9")
			mustRun(t, repo, "git", "commit", "-q", "-am", "an older root")
		}, v, "llmdrouter/go.mod requires " + rootModule + " v0.0.9", nil},
		{"the version's tag on another commit", func(t *testing.T, repo string) {
			mustRun(t, repo, "git", "tag", "v"+v)
			mustRun(t, repo, "git", "commit", "-q", "--allow-empty", "-m", "one more")
		}, v, "tag v" + v + " exists on", []string{"v" + v}},
		{"a v in the version", nil, "v" + v, "give it without the v", nil},
		{"not x.y.z", nil, "1.0", "is not a semantic version", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			repo := snapshot(t, root)
			if tc.prepare != nil {
				tc.prepare(t, repo)
			}
			out, err := release(repo, tc.version)
			if err == nil {
				t.Fatalf("make release VERSION=%s succeeded:\n%s", tc.version, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("make release VERSION=%s says\n%s\nwant %q", tc.version, out, tc.want)
			}
			tags := strings.Fields(mustRun(t, repo, "git", "tag", "--list"))
			if !slices.Equal(tags, tc.kept) {
				t.Errorf("tags after the refusal: %v, want %v", tags, tc.kept)
			}
		})
	}
}

func appendTo(t *testing.T, file, text string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(text)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// moduleProxy is a folder laid out as a Go module proxy, for GOPROXY=file://<folder>.
type moduleProxy string

// add serves m: its go.mod, its commit time and the zip that writeZip writes.
func (p moduleProxy) add(t *testing.T, m module.Version, gomod []byte, at time.Time, writeZip func(io.Writer) error) {
	t.Helper()
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		t.Fatal(err)
	}
	escVersion, err := module.EscapeVersion(m.Version)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(string(p), escPath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(map[string]any{"Version": m.Version, "Time": at.UTC()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, escVersion+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	err = writeZip(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("the module zip of %s: %v", m, err)
	}
	for name, content := range map[string][]byte{escVersion + ".info": info, escVersion + ".mod": gomod} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !module.IsPseudoVersion(m.Version) {
		appendTo(t, filepath.Join(dir, "list"), m.Version+"\n")
	}
}

// releasedProxy is a module proxy that serves what a user's go command fetches for
// the release version of repo (make release's tags, which must exist): the root
// module at tag vX.Y.Z and llmdrouter/ at tag llmdrouter/vX.Y.Z, each zipped from
// the repository's git content at its tag by golang.org/x/mod/zip (as the public
// proxy zips a tag), and upstream llm-d-router at the version llmdrouter/ requires,
// zipped from the pinned tarball of ../shared/upstream. It serves nothing else.
func releasedProxy(t *testing.T, root, repo, version string) string {
	t.Helper()
	p := moduleProxy(filepath.Join(t.TempDir(), "proxy"))
	for _, m := range []struct{ path, tag, subdir string }{
		{rootModule, "v" + version, ""},
		{nestedModule, "llmdrouter/v" + version, "llmdrouter"},
	} {
		if tagged(t, repo, m.tag) == "" {
			t.Fatalf("no tag %s in the released repository", m.tag)
		}
		gomod := mustRun(t, repo, "git", "show", m.tag+":"+path.Join(m.subdir, "go.mod"))
		at, err := time.Parse(time.RFC3339, strings.TrimSpace(mustRun(t, repo, "git", "log", "-1", "--format=%cI", m.tag)))
		if err != nil {
			t.Fatal(err)
		}
		mv := module.Version{Path: m.path, Version: "v" + version}
		p.add(t, mv, []byte(gomod), at, func(w io.Writer) error {
			return modzip.CreateFromVCS(w, mv, repo, m.tag, m.subdir)
		})
	}
	uv := module.Version{Path: upstreamMod, Version: upstreamVersion(t, root)}
	tarball, err := run(root, "hack/llmdrouter.sh", "tarball")
	if err != nil {
		if cached(t, uv) {
			t.Logf("no pinned tarball of upstream: the machine's module cache serves %s", uv)
			return string(p)
		}
		t.Fatalf("upstream for the module proxy: %v", err)
	}
	files, gomod := tarballFiles(t, strings.TrimSpace(tarball), "llm-d-router/")
	at, err := module.PseudoVersionTime(uv.Version)
	if err != nil {
		t.Fatal(err)
	}
	p.add(t, uv, gomod, at, func(w io.Writer) error { return modzip.Create(w, uv, files) })
	return string(p)
}

// machineCache is the download folder of this machine's module cache, which is
// laid out as a module proxy.
func machineCache(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
}

// cached says whether the machine's module cache holds m's zip.
func cached(t *testing.T, m module.Version) bool {
	t.Helper()
	escPath, err1 := module.EscapePath(m.Path)
	escVersion, err2 := module.EscapeVersion(m.Version)
	if err1 != nil || err2 != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(machineCache(t), escPath, "@v", escVersion+".zip"))
	return err == nil
}

// upstreamVersion is the version of upstream llm-d-router that llmdrouter/go.mod
// requires.
func upstreamVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "llmdrouter", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == upstreamMod {
			return f[1]
		}
	}
	t.Fatalf("llmdrouter/go.mod does not require %s", upstreamMod)
	return ""
}

// tarFile is a regular file of a tarball, for golang.org/x/mod/zip.
type tarFile struct {
	path string
	info fs.FileInfo
	data []byte
}

func (f tarFile) Path() string                 { return f.path }
func (f tarFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f tarFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

// tarballFiles reads the files under prefix of a .tar.gz (git archive's layout),
// and its go.mod.
func tarballFiles(t *testing.T, tarball, prefix string) ([]modzip.File, []byte) {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var files []modzip.File
	var gomod []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", tarball, err)
		}
		name, ok := strings.CutPrefix(h.Name, prefix)
		if !ok || h.Typeflag != tar.TypeReg {
			continue // git archive's pax header, directories, symlinks (which module zips leave out)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, tarFile{path: name, info: h.FileInfo(), data: data})
		if name == "go.mod" {
			gomod = data
		}
	}
	if gomod == nil {
		t.Fatalf("%s has no %sgo.mod", tarball, prefix)
	}
	return files, gomod
}
