// Package render renders the project's deployment channels in-process (the Helm
// chart with the Helm SDK) and decodes manifests into typed objects, so that tests
// assert on objects rather than on text.
package render

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/postrender"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// ChartDir is the path of charts/epp.
func ChartDir() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "epp"), nil
}

// ChartAppVersion is charts/epp's appVersion: the version of every channel's image.
func ChartAppVersion() (string, error) {
	dir, err := ChartDir()
	if err != nil {
		return "", err
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	return chrt.Metadata.AppVersion, nil
}

// Rendering is one rendering of the chart.
type Rendering struct {
	// Manifest is what `helm install` applies; Hooks are the hook manifests (the
	// `helm test` pod), not applied at install.
	Manifest, Hooks, Notes string
}

// Helm renders charts/epp as `helm install <release> charts/epp -n <namespace>
// --dry-run=client` would, values included and validated against the chart's
// schema, and returns the manifest and NOTES.txt.
func Helm(release, namespace string, values map[string]any) (manifest, notes string, err error) {
	r, err := HelmWith(release, namespace, values)
	return r.Manifest, r.Notes, err
}

// HelmWith is Helm against a cluster that also serves apiVersions (as
// "group/version/Kind", e.g. "monitoring.coreos.com/v1/ServiceMonitor"), returning
// the hooks too. The Kubernetes version is the one the tests run (hack/k8s/go.mod).
func HelmWith(release, namespace string, values map[string]any, apiVersions ...string) (Rendering, error) {
	return HelmRender(release, namespace, values, HelmOptions{APIVersions: apiVersions})
}

// HelmOptions say what to render and for which cluster.
type HelmOptions struct {
	// Chart is the chart's folder; charts/epp by default.
	Chart string
	// APIVersions the cluster serves besides the built-in ones.
	APIVersions []string
	// PostRenderer, when set, runs on the manifests as helm's --post-renderer does.
	PostRenderer postrender.PostRenderer
	// Kube is the cluster's Kubernetes version; the tests' by default.
	Kube *testenv.KubeVersion
}

// HelmRender renders a chart as `helm install --dry-run=client` would.
func HelmRender(release, namespace string, values map[string]any, o HelmOptions) (Rendering, error) {
	dir := o.Chart
	if dir == "" {
		var err error
		if dir, err = ChartDir(); err != nil {
			return Rendering{}, err
		}
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return Rendering{}, fmt.Errorf("loading %s: %w", dir, err)
	}
	kube := o.Kube
	if kube == nil {
		k, err := testenv.KubernetesVersion()
		if err != nil {
			return Rendering{}, err
		}
		kube = &k
	}
	install := action.NewInstall(&action.Configuration{})
	install.ReleaseName = release
	install.Namespace = namespace
	install.DryRun = true
	install.DryRunOption = "client"
	install.ClientOnly = true
	install.KubeVersion = &chartutil.KubeVersion{Version: kube.String(), Major: strconv.Itoa(kube.Major), Minor: strconv.Itoa(kube.Minor)}
	install.APIVersions = o.APIVersions
	install.Replace = true
	install.PostRenderer = o.PostRenderer
	rel, err := install.Run(chrt, values)
	if err != nil {
		return Rendering{}, err
	}
	var hooks []string
	for _, h := range rel.Hooks {
		hooks = append(hooks, h.Manifest)
	}
	return Rendering{Manifest: rel.Manifest, Hooks: strings.Join(hooks, "\n---\n"), Notes: rel.Info.Notes}, nil
}

// HelmObjects is Helm followed by Decode.
func HelmObjects(release, namespace string, values map[string]any) ([]client.Object, error) {
	manifest, _, err := Helm(release, namespace, values)
	if err != nil {
		return nil, err
	}
	return Decode([]byte(manifest))
}

// Decode turns a multi-document YAML manifest into typed objects of client-go's
// scheme, ordered by kind and name; kinds the scheme does not know (a
// ServiceMonitor) become *unstructured.Unstructured.
func Decode(manifest []byte) ([]client.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var out []client.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				return nil, fmt.Errorf("decoding %q: %w", firstLine(doc), err)
			}
			obj, err = u, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %q: %w", firstLine(doc), err)
		}
		co, ok := obj.(client.Object)
		if !ok {
			return nil, fmt.Errorf("%T is not an object", obj)
		}
		out = append(out, co)
	}
	SortObjects(out)
	return out, nil
}

// SortObjects orders objects by kind, namespace and name.
func SortObjects(objs []client.Object) {
	sort.SliceStable(objs, func(i, j int) bool { return Key(objs[i]) < Key(objs[j]) })
}

// Key is "Kind/namespace/name" of a typed object.
func Key(o client.Object) string {
	return Kind(o) + "/" + o.GetNamespace() + "/" + o.GetName()
}

// Kind is the object's kind, from the scheme when TypeMeta is empty.
func Kind(o runtime.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(o)
	if err != nil || len(gvks) == 0 {
		return fmt.Sprintf("%T", o)
	}
	return gvks[0].Kind
}

func isOnlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

func firstLine(doc []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(doc), []byte("\n"))
	return string(line)
}
