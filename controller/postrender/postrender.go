// Package postrender adds peer discovery to an EPP that another chart renders, as a
// Helm post-renderer: `helm install ... --post-renderer epp --post-renderer-args
// post-render`. It is how a release of llm-d-router's own chart
// (llm-d-router-standalone) gains peer discovery without switching charts.
//
// It finds the Deployment (or StatefulSet) with the EPP container, and adds, never
// removing or replacing anything the chart rendered but the image:
//
//   - to the EPP configuration the container reads (the --config-file in a ConfigMap
//     volume, or --config-text): the peer-discovery plugin and
//     dataLayer.peerDiscovery.pluginRef;
//   - to the EPP container: the plugin's settings as env (EPP_PEER_SERVICE,
//     EPP_PEER_DEBUG_ADDRESS, EPP_PEER_MEMBERSHIP), the downward-API identity it
//     lacks (POD_IP, POD_IPS), the ports peer-sync and http-peers, and the image of
//     llm-d-router's EPP with the plugin (--image);
//   - to the pod template: an annotation with the configuration's hash, so that a
//     changed configuration rolls the pods;
//   - to the Service that selects the pods: the ports peer-sync and http-peers;
//   - a namespaced Role and RoleBinding (endpointslices get, list, watch) for the
//     pods' ServiceAccount.
//
// Every arg, env, probe, volume and the ServiceAccount token of the chart stay.
package postrender

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Options say what to add.
type Options struct {
	// Container is the name of the EPP container ("epp").
	Container string
	// Image replaces the EPP container's image: llm-d-router's EPP with the plugin.
	// Empty keeps the chart's, unless that is upstream's own image (which has no
	// peer-discovery plugin): then it is an error.
	Image string
	// Service is the peer Service; empty: the Service that selects the EPP's pods.
	Service string
	// Membership is "ready" or "alive"; empty: "alive" when the EPP runs leader
	// election (its standbys are not ready), else "ready".
	Membership string
	// PortName and Port are the peer-sync port; DebugPort the plugin's /debug/peers.
	PortName  string
	Port      int
	DebugPort int
	// HelmTest adds a `helm test` hook: a Pod of the pods' ServiceAccount that runs
	// `epp check-peers` (image TestImage) against the peer Service, so that
	// `helm test <release>` proves every replica lists exactly the others. Only Helm
	// 4 reads hooks from a post-renderer's output (Helm 3 would create the Pod with
	// the release), so its plugin asks for it.
	HelmTest bool
	// TestImage is the image of the epp binary for the hook; empty: epp beside the
	// EPP's image when that is llm-d-router-epp (<prefix>/epp:<same tag>), else no
	// hook.
	TestImage string
}

// Defaults of Options.
const (
	DefaultContainer = "epp"
	DefaultPortName  = "peer-sync"
	DefaultPort      = 9005
	DefaultDebugPort = 9091
	// PluginName is the plugin's name in the EPP configuration (its metrics'
	// discovery label).
	PluginName = "peer-discovery"
	// upstreamImage is the repository of llm-d-router's own EPP image.
	upstreamImage = "llm-d-router-endpoint-picker"
)

type object = map[string]any

// Render reads the manifests a chart rendered (a YAML stream) and returns them with
// peer discovery added.
func Render(in []byte, o Options) ([]byte, error) {
	if o.Container == "" {
		o.Container = DefaultContainer
	}
	if o.PortName == "" {
		o.PortName = DefaultPortName
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.DebugPort == 0 {
		o.DebugPort = DefaultDebugPort
	}
	if o.Membership != "" && o.Membership != "ready" && o.Membership != "alive" {
		return nil, fmt.Errorf("--membership=%q: want ready or alive", o.Membership)
	}
	docs, err := decode(in)
	if err != nil {
		return nil, err
	}
	w, err := findWorkload(docs, o.Container)
	if err != nil {
		return nil, err
	}
	svc, err := findService(docs, w, o.Service)
	if err != nil {
		return nil, err
	}
	c := w.container
	args := stringList(c["args"])
	if o.Membership == "" {
		o.Membership = "ready"
		if slices.Contains(args, "--ha-enable-leader-election") || slices.Contains(args, "--ha-enable-leader-election=true") {
			o.Membership = "alive" // only the leader is ready: the standbys must be peers too
		}
	}
	hash, err := addPlugin(docs, w, args)
	if err != nil {
		return nil, err
	}
	if err := setImage(c, o.Image); err != nil {
		return nil, err
	}
	// The replica's identity, unless the chart gives it already (as upstream's
	// does for POD_NAME and NAMESPACE): kept as the chart has it.
	for _, e := range []object{
		fieldEnv("POD_NAME", "metadata.name"), fieldEnv("NAMESPACE", "metadata.namespace"),
		fieldEnv("POD_IP", "status.podIP"), fieldEnv("POD_IPS", "status.podIPs"),
	} {
		if !hasNamed(c, "env", e["name"]) {
			c["env"] = append(asAny(objects(c["env"])), e)
		}
	}
	env := []object{
		{"name": "EPP_PEER_SERVICE", "value": svc.name},
		{"name": "EPP_PEER_DEBUG_ADDRESS", "value": ":" + strconv.Itoa(o.DebugPort)},
	}
	if o.PortName != DefaultPortName {
		env = append(env, object{"name": "EPP_PEER_PORT_NAME", "value": o.PortName})
	}
	if o.Port != DefaultPort {
		env = append(env, object{"name": "EPP_PEER_PORT", "value": strconv.Itoa(o.Port)})
	}
	if o.Membership != "ready" {
		env = append(env, object{"name": "EPP_PEER_MEMBERSHIP", "value": o.Membership})
	}
	for _, e := range env {
		if err := addNamed(c, "env", e); err != nil {
			return nil, err
		}
	}
	// The pod's containers share one network: a port of another container, or of
	// the EPP under another name, on a number the plugin binds is a clash the API
	// server would not see (the EPP would fail to bind); on the Service it would,
	// after the rest of the release was applied.
	if err := checkPodPorts(w, map[string]int{o.PortName: o.Port, "http-peers": o.DebugPort}); err != nil {
		return nil, err
	}
	if err := checkServicePorts(svc, map[string]int{o.PortName: o.Port, "http-peers": o.DebugPort}); err != nil {
		return nil, err
	}
	for _, p := range []object{
		{"name": o.PortName, "containerPort": o.Port, "protocol": "TCP"},
		{"name": "http-peers", "containerPort": o.DebugPort, "protocol": "TCP"},
	} {
		if err := addNamed(c, "ports", p); err != nil {
			return nil, err
		}
	}
	for _, p := range []object{
		{"name": o.PortName, "port": o.Port, "targetPort": o.PortName, "protocol": "TCP"},
		{"name": "http-peers", "port": o.DebugPort, "targetPort": "http-peers", "protocol": "TCP"},
	} {
		if err := addNamed(svc.spec, "ports", p); err != nil {
			return nil, err
		}
	}
	meta := mapAt(w.template, "metadata")
	annotations := mapAt(meta, "annotations")
	annotations["epp-peer-discovery/config-sha256"] = hash
	docs = append(docs, rbac(w, svc.name)...)
	if o.HelmTest {
		if img := testImage(o.TestImage, stringOf(c["image"])); img != "" {
			docs = append(docs, testHook(w, svc.name, o.Membership, img))
		}
	}
	return encode(docs)
}

// workload is the Deployment or StatefulSet with the EPP container.
type workload struct {
	doc       object
	name, ns  string
	template  object
	pod       object
	container object
}

func findWorkload(docs []object, container string) (*workload, error) {
	var found []*workload
	for _, d := range docs {
		if k, _ := d["kind"].(string); k != "Deployment" && k != "StatefulSet" {
			continue
		}
		spec, _ := d["spec"].(object)
		tmpl, _ := spec["template"].(object)
		pod, _ := tmpl["spec"].(object)
		for _, c := range objects(pod["containers"]) {
			if c["name"] == container {
				m := mapAt(d, "metadata")
				name, _ := m["name"].(string)
				ns, _ := m["namespace"].(string)
				found = append(found, &workload{doc: d, name: name, ns: ns, template: tmpl, pod: pod, container: c})
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("no Deployment or StatefulSet with a container named %q: is this an EPP chart? (--container names another)", container)
	default:
		return nil, fmt.Errorf("%d workloads with a container named %q: peer discovery is added to one EPP at a time", len(found), container)
	}
}

// service is the peer Service.
type service struct {
	name string
	spec object
}

func findService(docs []object, w *workload, name string) (*service, error) {
	podLabels := labels.Set{}
	for k, v := range mapAt(mapAt(w.template, "metadata"), "labels") {
		podLabels[k], _ = v.(string)
	}
	var found []*service
	for _, d := range docs {
		if d["kind"] != "Service" {
			continue
		}
		m := mapAt(d, "metadata")
		n, _ := m["name"].(string)
		spec := mapAt(d, "spec")
		sel := labels.Set{}
		for k, v := range mapAt(spec, "selector") {
			sel[k], _ = v.(string)
		}
		if spec["clusterIP"] == "None" {
			continue
		}
		if name != "" && n == name || name == "" && len(sel) > 0 && labels.SelectorFromSet(sel).Matches(podLabels) {
			found = append(found, &service{name: n, spec: spec})
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case name != "":
		return nil, fmt.Errorf("--service=%s: no such Service in the manifests", name)
	case len(found) == 0:
		return nil, fmt.Errorf("no Service selects the pods of %s: peers are found from the EndpointSlices of the EPP's Service (--service names it)", w.name)
	}
	var names []string
	for _, s := range found {
		if s.name == w.name {
			return s, nil
		}
		names = append(names, s.name)
	}
	return nil, fmt.Errorf("the Services %s all select the EPP's pods: name the peer Service with --service", strings.Join(names, ", "))
}

// flagOf names the flag that sets the port named name, for messages.
func flagOf(name string) string {
	if name == "http-peers" {
		return "--debug-port"
	}
	return "--port"
}

// tcp reports whether a port entry is TCP (the default protocol).
func tcp(p object) bool {
	proto, _ := p["protocol"].(string)
	return proto == "" || proto == "TCP"
}

// number is a port entry's number field as an int (YAML decodes it as float64).
func number(p object, field string) int {
	switch n := p[field].(type) {
	case float64:
		return int(n)
	case int:
		return n
	case int64:
		return int(n)
	}
	return 0
}

// checkPodPorts refuses a TCP port of any container of the pod (init containers,
// sidecars such as upstream's proxy, the EPP itself under another name) on a number
// that the plugin binds.
func checkPodPorts(w *workload, want map[string]int) error {
	for _, field := range []string{"initContainers", "containers"} {
		for _, ct := range objects(w.pod[field]) {
			for _, p := range objects(ct["ports"]) {
				for name, n := range want {
					if tcp(p) && number(p, "containerPort") == n && (ct["name"] != w.container["name"] || p["name"] != name) {
						return fmt.Errorf("%s=%d: container %v of %s already has port %d (%v): pick another %s",
							flagOf(name), n, ct["name"], w.name, n, p["name"], flagOf(name))
					}
				}
			}
		}
	}
	return nil
}

// checkServicePorts refuses a TCP port of the peer Service on a number the plugin's
// ports take, under another name.
func checkServicePorts(svc *service, want map[string]int) error {
	for _, p := range objects(svc.spec["ports"]) {
		for name, n := range want {
			if tcp(p) && number(p, "port") == n && p["name"] != name {
				return fmt.Errorf("%s=%d: Service %s already has port %d (%v): pick another %s",
					flagOf(name), n, svc.name, n, p["name"], flagOf(name))
			}
		}
	}
	return nil
}

// addPlugin adds the plugin to the configuration the EPP reads, and returns the
// configuration's hash.
func addPlugin(docs []object, w *workload, args []string) (string, error) {
	file, text, textAt := "", "", -1
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--config-file="):
			file = strings.TrimPrefix(a, "--config-file=")
		case a == "--config-file" && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--config-text="):
			text, textAt = strings.TrimPrefix(a, "--config-text="), i
		case a == "--config-text" && i+1 < len(args):
			text, textAt = args[i+1], i+1
		}
	}
	if textAt >= 0 {
		out, err := withPlugin("--config-text", text)
		if err != nil {
			return "", err
		}
		raw := w.container["args"].([]any)
		if strings.HasPrefix(raw[textAt].(string), "--config-text=") {
			raw[textAt] = "--config-text=" + out
		} else {
			raw[textAt] = out
		}
		return hash(out), nil
	}
	if file == "" {
		return "", errors.New("the EPP reads no configuration (--config-file or --config-text): the plugin cannot be added")
	}
	cm, key, err := configMapOf(docs, w, file)
	if err != nil {
		return "", err
	}
	data := mapAt(cm, "data")
	content, _ := data[key].(string)
	out, err := withPlugin(file, content)
	if err != nil {
		return "", err
	}
	data[key] = out
	return hash(out), nil
}

// configMapOf finds the ConfigMap and key the EPP container reads file from.
func configMapOf(docs []object, w *workload, file string) (object, string, error) {
	dir, key := path.Dir(file), path.Base(file)
	var volume string
	for _, m := range objects(w.container["volumeMounts"]) {
		if p, _ := m["mountPath"].(string); path.Clean(p) == dir {
			volume, _ = m["name"].(string)
		}
	}
	if volume == "" {
		return nil, "", fmt.Errorf("--config-file %s: no volume of the EPP container is mounted at %s", file, dir)
	}
	var cmName string
	for _, v := range objects(w.pod["volumes"]) {
		if v["name"] == volume {
			if cm, ok := v["configMap"].(object); ok {
				cmName, _ = cm["name"].(string)
			}
		}
	}
	if cmName == "" {
		return nil, "", fmt.Errorf("--config-file %s: volume %s is not a ConfigMap", file, volume)
	}
	for _, d := range docs {
		if d["kind"] == "ConfigMap" && mapAt(d, "metadata")["name"] == cmName {
			if _, ok := mapAt(d, "data")[key]; !ok {
				return nil, "", fmt.Errorf("--config-file %s: ConfigMap %s has no key %s", file, cmName, key)
			}
			return d, key, nil
		}
	}
	return nil, "", fmt.Errorf("--config-file %s: ConfigMap %s is not among the manifests", file, cmName)
}

// withPlugin returns the EPP configuration with the plugin and its pluginRef.
func withPlugin(where, content string) (string, error) {
	var cfg object
	if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
		return "", fmt.Errorf("%s: not an EPP configuration: %w", where, err)
	}
	if cfg == nil {
		cfg = object{}
	}
	plugins := objects(cfg["plugins"])
	has := false
	for _, p := range plugins {
		if p["name"] == PluginName {
			if p["type"] != "endpointslice-peer-discovery" {
				return "", fmt.Errorf("%s: a plugin named %s of type %v is there already", where, PluginName, p["type"])
			}
			has = true
		}
	}
	if !has {
		cfg["plugins"] = append(asAny(plugins), object{"name": PluginName, "type": "endpointslice-peer-discovery"})
	}
	dl := mapAt(cfg, "dataLayer")
	if pd, ok := dl["peerDiscovery"].(object); ok && pd["pluginRef"] != PluginName {
		return "", fmt.Errorf("%s: dataLayer.peerDiscovery.pluginRef is %v already", where, pd["pluginRef"])
	}
	dl["peerDiscovery"] = object{"pluginRef": PluginName}
	out, err := yaml.Marshal(cfg)
	return string(out), err
}

// setImage replaces the EPP container's image.
func setImage(c object, image string) error {
	if image != "" {
		c["image"] = image
		return nil
	}
	current, _ := c["image"].(string)
	if strings.Contains(current, upstreamImage) {
		return fmt.Errorf("the EPP container runs %s, llm-d-router's own image, which has no peer-discovery plugin: pass --image=<llm-d-router EPP with peer discovery> (make image-llmd builds epp-peer-discovery/llm-d-router-epp)", current)
	}
	return nil
}

// testImage is the image of the epp binary for the test hook: given, or beside the
// EPP's image of llm-d-router's EPP with the plugin (…/llm-d-router-epp:tag gives
// …/epp:tag), else "".
func testImage(given, epp string) string {
	if given != "" {
		return given
	}
	repo, tag, ok := strings.Cut(epp, ":")
	if !ok || strings.Contains(tag, "/") || path.Base(repo) != "llm-d-router-epp" {
		return ""
	}
	return path.Join(path.Dir(repo), "epp") + ":" + tag
}

// testHook is the `helm test` Pod: epp check-peers from inside the cluster, with the
// pods' ServiceAccount (whose Role reads the EndpointSlices) and the replicas'
// membership; its labels are not the Service's selector (never an endpoint, never a
// peer). It runs under the restricted pod security level.
func testHook(w *workload, svc, membership, image string) object {
	sa, _ := w.pod["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	name := w.name + "-test-peers"
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	meta := object{"name": name, "labels": object{"app.kubernetes.io/component": "test", "app.kubernetes.io/part-of": w.name},
		"annotations": object{"helm.sh/hook": "test", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}}
	if w.ns != "" {
		meta["namespace"] = w.ns
	}
	args := []any{"check-peers", "--service=" + svc, "--port-name=http-peers", "--membership=" + membership, "--timeout=60s"}
	if w.ns != "" {
		args = append(args[:2], append([]any{"--namespace=" + w.ns}, args[2:]...)...)
	} else {
		args = append(args, "--namespace=$(NAMESPACE)")
	}
	return object{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": object{
		"restartPolicy": "Never", "serviceAccountName": sa, "automountServiceAccountToken": true,
		"securityContext": object{"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": object{"type": "RuntimeDefault"}},
		"containers": []any{object{"name": "check-peers", "image": image, "imagePullPolicy": "IfNotPresent", "args": args,
			"env":             []any{fieldEnv("NAMESPACE", "metadata.namespace")},
			"securityContext": object{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "capabilities": object{"drop": []any{"ALL"}}},
			"resources":       object{"requests": object{"cpu": "10m", "memory": "32Mi"}, "limits": object{"memory": "64Mi"}}}},
	}}
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

// rbac is the peer-discovery Role and RoleBinding for the pods' ServiceAccount.
func rbac(w *workload, svc string) []object {
	sa, _ := w.pod["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	name := svc + "-peer-discovery"
	meta := func() object {
		m := object{"name": name}
		if w.ns != "" {
			m["namespace"] = w.ns
		}
		if l := mapAt(w.doc, "metadata")["labels"]; l != nil {
			m["labels"] = l
		}
		return m
	}
	subject := object{"kind": "ServiceAccount", "name": sa}
	if w.ns != "" {
		subject["namespace"] = w.ns
	}
	return []object{
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(),
			"rules": []any{object{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"get", "list", "watch"}}}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
			"roleRef":  object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
			"subjects": []any{subject}},
	}
}

func hasNamed(m object, field string, name any) bool {
	for _, have := range objects(m[field]) {
		if have["name"] == name {
			return true
		}
	}
	return false
}

// addNamed appends item to the list field of m unless an item of its name is
// there; an item of its name with other content is an error (the chart set it).
func addNamed(m object, field string, item object) error {
	list := objects(m[field])
	for _, have := range list {
		if have["name"] != item["name"] {
			continue
		}
		if !same(have, item) {
			return fmt.Errorf("%s %v is set already, differently: %v", field, item["name"], have)
		}
		return nil
	}
	m[field] = append(asAny(list), item)
	return nil
}

func same(a, b object) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return bytes.Equal(ja, jb)
}

func fieldEnv(name, path string) object {
	return object{"name": name, "valueFrom": object{"fieldRef": object{"fieldPath": path}}}
}

// mapAt returns m[key] as a map, creating it when absent.
func mapAt(m object, key string) object {
	v, ok := m[key].(object)
	if !ok {
		v = object{}
		m[key] = v
	}
	return v
}

func objects(v any) []object {
	list, _ := v.([]any)
	var out []object
	for _, e := range list {
		if o, ok := e.(object); ok {
			out = append(out, o)
		}
	}
	return out
}

func asAny(list []object) []any {
	out := make([]any, 0, len(list)+1)
	for _, o := range list {
		out = append(out, o)
	}
	return out
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// decode splits a YAML stream into its objects (comments and empty documents go).
func decode(in []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	var docs []object
	for {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		var o object
		if err := yaml.Unmarshal(b, &o); err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		if len(o) > 0 {
			docs = append(docs, o)
		}
	}
}

// encode writes the objects as a YAML stream, in their order.
func encode(docs []object) ([]byte, error) {
	var buf bytes.Buffer
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Flags parses the arguments of `epp post-render` into Options.
func Flags(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("epp post-render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: helm install|upgrade|template ... --post-renderer epp --post-renderer-args post-render [--post-renderer-args --image=IMAGE ...]")
		fmt.Fprintln(stderr, "Reads the manifests a chart rendered on stdin and writes them with peer discovery added to the EPP on stdout.")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Image, "image", "", "image of llm-d-router's EPP with the peer-discovery plugin, for the EPP container (empty: keep the chart's, unless it is upstream's own)")
	fs.StringVar(&o.Container, "container", DefaultContainer, "name of the EPP container")
	fs.StringVar(&o.Service, "service", "", "the peer Service (empty: the one Service that selects the EPP's pods)")
	fs.StringVar(&o.Membership, "membership", "", "ready or alive (empty: alive when the EPP runs --ha-enable-leader-election, else ready)")
	fs.StringVar(&o.PortName, "port-name", DefaultPortName, "name of the peer-sync port")
	fs.IntVar(&o.Port, "port", DefaultPort, "number of the peer-sync port")
	fs.IntVar(&o.DebugPort, "debug-port", DefaultDebugPort, "port of the plugin's /debug/peers (http-peers)")
	fs.BoolVar(&o.HelmTest, "helm-test", false, "add a `helm test` hook that runs epp check-peers (Helm 4 only: the plugin epp-post-render sets it; Helm 3 does not read hooks from a post-renderer)")
	fs.StringVar(&o.TestImage, "test-image", "", "image of the epp binary for the --helm-test hook (empty: <prefix>/epp:<tag> beside an --image of <prefix>/llm-d-router-epp:<tag>, else no hook)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags are --name=value)", fs.Arg(0))
	}
	for name, p := range map[string]int{"--port": o.Port, "--debug-port": o.DebugPort} {
		if p < 1 || p > 65535 {
			return o, fmt.Errorf("%s=%d: want a port, 1-65535", name, p)
		}
	}
	if o.Port == o.DebugPort {
		return o, fmt.Errorf("--port and --debug-port are both %d", o.Port)
	}
	return o, nil
}
