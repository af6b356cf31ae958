package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// UpstreamTreeEnv names the folder of llm-d-router's source tree (the pinned one of
// ../shared/upstream, as `hack/llmdrouter.sh upstream` extracts it); make sets it.
const UpstreamTreeEnv = "UPSTREAM_TREE"

// UpstreamChart copies llm-d-router's own chart, llm-d-router-standalone, into dst
// with its library chart (routerlib, its dependency "router") in charts/, as
// `helm dependency build` would, and returns the chart's folder.
func UpstreamChart(dst string) (string, error) {
	tree := os.Getenv(UpstreamTreeEnv)
	if tree == "" {
		return "", errors.New(UpstreamTreeEnv + " is not set: run the tests through make, which extracts llm-d-router's tree (hack/llmdrouter.sh upstream)")
	}
	src := filepath.Join(tree, "config", "charts")
	chart := filepath.Join(dst, "llm-d-router-standalone")
	if err := os.CopyFS(chart, os.DirFS(filepath.Join(src, "llm-d-router-standalone"))); err != nil {
		return "", fmt.Errorf("%s=%s: %w", UpstreamTreeEnv, tree, err)
	}
	if err := os.CopyFS(filepath.Join(chart, "charts", "routerlib"), os.DirFS(filepath.Join(src, "routerlib"))); err != nil {
		return "", fmt.Errorf("%s=%s: %w", UpstreamTreeEnv, tree, err)
	}
	return chart, nil
}
