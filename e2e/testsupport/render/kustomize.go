package render

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// KustomizeFS returns an in-memory copy of the repository's kustomize/ folder, at
// /kustomize, to which tests add overlays of their own without touching the tree.
func KustomizeFS() (filesys.FileSystem, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	mem := filesys.MakeFsInMemory()
	src := filepath.Join(root, "kustomize")
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		dst := filepath.Join("/kustomize", rel)
		if d.IsDir() {
			return mem.MkdirAll(dst)
		}
		if !strings.HasSuffix(path, ".yaml") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(dst, b)
	})
	return mem, err
}

// Kustomize builds dir (e.g. "/kustomize/overlays/peer-discovery") of fsys with
// krusty, kustomize's Go API (what `kubectl apply -k` runs), and decodes the result.
func Kustomize(fsys filesys.FileSystem, dir string) ([]client.Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	y, err := resMap.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(y)
}

// KustomizeOverlay builds a new overlay at /kustomize/test/<name> with the given
// kustomization.yaml content (paths relative to it), in an in-memory copy of the tree.
func KustomizeOverlay(name, kustomization string) ([]client.Object, error) {
	fsys, err := KustomizeFS()
	if err != nil {
		return nil, err
	}
	dir := "/kustomize/test/" + name
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, err
	}
	if err := fsys.WriteFile(dir+"/kustomization.yaml", []byte(kustomization)); err != nil {
		return nil, err
	}
	return Kustomize(fsys, dir)
}
