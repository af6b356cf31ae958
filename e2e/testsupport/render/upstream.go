package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// UpstreamDeployment renders llm-d-router-standalone (copied from the pinned tree
// into dir) as release in namespace with values, as `helm template` would, and
// returns its Deployment of the EPP (the one with a container epp).
func UpstreamDeployment(dir, release, namespace string, values map[string]any) (*appsv1.Deployment, error) {
	chart, err := UpstreamChart(dir)
	if err != nil {
		return nil, err
	}
	r, err := HelmRender(release, namespace, values, HelmOptions{Chart: chart})
	if err != nil {
		return nil, fmt.Errorf("helm template llm-d-router-standalone: %w", err)
	}
	objs, err := Decode([]byte(r.Manifest))
	if err != nil {
		return nil, err
	}
	return EPPDeployment(objs)
}

// EPPDeployment returns the Deployment among objs that has a container epp.
func EPPDeployment(objs []client.Object) (*appsv1.Deployment, error) {
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && EPPContainer(d) != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("no Deployment with a container epp")
}

// EPPContainer returns the Deployment's container named epp, or nil.
func EPPContainer(d *appsv1.Deployment) *corev1.Container {
	return eppIn(d.Spec.Template.Spec.Containers)
}

// EPPContainerOf returns the container named epp among cs, or fails t.
func EPPContainerOf(t testing.TB, cs []corev1.Container) corev1.Container {
	t.Helper()
	c := eppIn(cs)
	if c == nil {
		t.Fatalf("no container epp among %d", len(cs))
		return corev1.Container{}
	}
	return *c
}

func eppIn(cs []corev1.Container) *corev1.Container {
	for i := range cs {
		if cs[i].Name == "epp" {
			return &cs[i]
		}
	}
	return nil
}
