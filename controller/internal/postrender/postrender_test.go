package postrender_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/postrender"
)

// eppChart is what a chart of an EPP renders: a ConfigMap with the configuration, a
// Deployment whose container "epp" reads it, the Service that selects the pods, and
// a second Deployment (a proxy) that the post-renderer must leave alone.
const eppChart = `
apiVersion: v1
kind: ConfigMap
metadata: {name: rel-epp, namespace: ns1}
data:
  default-plugins.yaml: |
    apiVersion: llm-d.ai/v1alpha1
    kind: EndpointPickerConfig
    plugins:
    - type: queue-scorer
    schedulingProfiles:
    - name: default
      plugins:
      - pluginRef: queue-scorer
  other.yaml: |
    plugins: []
---
apiVersion: v1
kind: Service
metadata: {name: rel-epp, namespace: ns1}
spec:
  selector: {app: rel-epp}
  ports:
  - {name: grpc-ext-proc, port: 9002}
---
apiVersion: v1
kind: Service
metadata: {name: rel-proxy, namespace: ns1}
spec:
  selector: {app: rel-proxy}
  ports:
  - {name: http, port: 80}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: rel-epp, namespace: ns1, labels: {team: a}}
spec:
  replicas: 3
  selector: {matchLabels: {app: rel-epp}}
  template:
    metadata: {labels: {app: rel-epp}}
    spec:
      serviceAccountName: rel-epp
      containers:
      - name: epp
        image: registry.example/llm-d-router-endpoint-picker:main
        args: [--pool-name, pool, --config-file, /config/default-plugins.yaml, --ha-enable-leader-election, --grpc-health-port, "9003"]
        env:
        - name: NAMESPACE
          valueFrom: {fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}
        - {name: POD_NAME, value: fixed}
        - {name: TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}
        ports:
        - {name: grpc, containerPort: 9002}
        readinessProbe:
          grpc: {port: 9003, service: readiness}
        volumeMounts:
        - {name: plugins-config-volume, mountPath: /config}
      volumes:
      - name: plugins-config-volume
        configMap: {name: rel-epp}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: rel-proxy, namespace: ns1}
spec:
  selector: {matchLabels: {app: rel-proxy}}
  template:
    metadata: {labels: {app: rel-proxy}}
    spec:
      containers:
      - {name: proxy, image: envoy}
`

const image = "epp-peer-discovery/llm-d-router-epp:0.1.0"

// manifests indexes rendered objects by kind/name.
func manifests(t *testing.T, out []byte) map[string]map[string]any {
	t.Helper()
	m := map[string]map[string]any{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(doc, "---\n")+"\n"), &o); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, out)
		}
		if o == nil {
			continue
		}
		meta := o["metadata"].(map[string]any)
		m[o["kind"].(string)+"/"+meta["name"].(string)] = o
	}
	return m
}

func at(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := o.(map[string]any)
			o = m[k]
		case int:
			l, _ := o.([]any)
			if k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func named(list any, name string) map[string]any {
	for _, e := range list.([]any) {
		if m := e.(map[string]any); m["name"] == name {
			return m
		}
	}
	return nil
}

func TestAddsPeerDiscoveryAndKeepsTheChartsEPP(t *testing.T) {
	out, err := postrender.Render([]byte(eppChart), postrender.Options{Image: image})
	if err != nil {
		t.Fatal(err)
	}
	m := manifests(t, out)
	before := manifests(t, []byte(eppChart))

	// The configuration the EPP reads has the plugin and the pluginRef; the rest of it,
	// and the other configuration, are as rendered.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(at(m["ConfigMap/rel-epp"], "data", "default-plugins.yaml").(string)), &cfg); err != nil {
		t.Fatal(err)
	}
	if p := named(cfg["plugins"], postrender.PluginName); p == nil || p["type"] != "endpointslice-peer-discovery" {
		t.Errorf("plugins = %v, want %s of type endpointslice-peer-discovery", cfg["plugins"], postrender.PluginName)
	}
	if ref := at(cfg, "dataLayer", "peerDiscovery", "pluginRef"); ref != postrender.PluginName {
		t.Errorf("dataLayer.peerDiscovery.pluginRef = %v", ref)
	}
	if at(cfg, "schedulingProfiles", 0, "plugins", 0, "pluginRef") != "queue-scorer" || at(cfg, "plugins", 0, "type") != "queue-scorer" {
		t.Errorf("the chart's configuration changed: %v", cfg)
	}
	if got, want := at(m["ConfigMap/rel-epp"], "data", "other.yaml"), at(before["ConfigMap/rel-epp"], "data", "other.yaml"); got != want {
		t.Errorf("a configuration the EPP does not read changed: %q, was %q", got, want)
	}

	// The EPP container keeps every arg, probe, volume and env of the chart (even
	// POD_NAME's value: the chart's identity wins), gets the image, the plugin's env
	// and the ports.
	dep := m["Deployment/rel-epp"]
	c := at(dep, "spec", "template", "spec", "containers", 0).(map[string]any)
	bc := at(before["Deployment/rel-epp"], "spec", "template", "spec", "containers", 0).(map[string]any)
	for _, k := range []string{"args", "readinessProbe", "volumeMounts"} {
		if !equal(c[k], bc[k]) {
			t.Errorf("%s changed: %v, was %v", k, c[k], bc[k])
		}
	}
	if c["image"] != image {
		t.Errorf("image = %v", c["image"])
	}
	for _, e := range bc["env"].([]any) {
		if have := named(c["env"], e.(map[string]any)["name"].(string)); !equal(have, e) {
			t.Errorf("env %v changed to %v", e, have)
		}
	}
	for name, want := range map[string]string{
		"EPP_PEER_SERVICE": "rel-epp", "EPP_PEER_DEBUG_ADDRESS": ":9091",
		"EPP_PEER_MEMBERSHIP": "alive", // leader election: the standbys are peers too
	} {
		if e := named(c["env"], name); e == nil || e["value"] != want {
			t.Errorf("env %s = %v, want %s", name, e, want)
		}
	}
	if e := named(c["env"], "POD_IP"); at(e, "valueFrom", "fieldRef", "fieldPath") != "status.podIP" {
		t.Errorf("env POD_IP = %v", e)
	}
	if p := named(c["ports"], "peer-sync"); p == nil || p["containerPort"] != float64(9005) {
		t.Errorf("container port peer-sync = %v", p)
	}
	if p := named(c["ports"], "http-peers"); p == nil || p["containerPort"] != float64(9091) {
		t.Errorf("container port http-peers = %v", p)
	}
	if !equal(at(dep, "spec", "template", "spec", "volumes"), at(before["Deployment/rel-epp"], "spec", "template", "spec", "volumes")) {
		t.Error("volumes changed")
	}
	if h, _ := at(dep, "spec", "template", "metadata", "annotations", "epp-peer-discovery/config-sha256").(string); len(h) != 64 {
		t.Errorf("config hash annotation = %q", h)
	}

	// The Service that selects the EPP's pods carries the peer port (the source
	// reads it from its EndpointSlices); the other Service and Deployment are as
	// rendered.
	if p := named(at(m["Service/rel-epp"], "spec", "ports"), "peer-sync"); p == nil || p["targetPort"] != "peer-sync" {
		t.Errorf("Service port peer-sync = %v", p)
	}
	for _, k := range []string{"Service/rel-proxy", "Deployment/rel-proxy"} {
		if !equal(m[k], before[k]) {
			t.Errorf("%s changed: %v", k, m[k])
		}
	}

	// Read access to the Service's EndpointSlices, in the release's namespace, for the
	// pods' ServiceAccount, and nothing more.
	role := m["Role/rel-epp-peer-discovery"]
	if at(role, "metadata", "namespace") != "ns1" || !equal(at(role, "rules"), []any{map[string]any{
		"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"get", "list", "watch"},
	}}) {
		t.Errorf("Role = %v", role)
	}
	rb := m["RoleBinding/rel-epp-peer-discovery"]
	if at(rb, "subjects", 0, "name") != "rel-epp" || at(rb, "subjects", 0, "namespace") != "ns1" || at(rb, "roleRef", "name") != "rel-epp-peer-discovery" {
		t.Errorf("RoleBinding = %v", rb)
	}

	// Running it again (helm upgrade renders afresh, but a user may chain it) is a
	// no-op.
	again, err := postrender.Render(out, postrender.Options{Image: image})
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if !equal(manifests(t, again), m) {
		t.Errorf("a second run changed the output:\n%s", again)
	}
}

func TestConfigTextAndOptions(t *testing.T) {
	chart := strings.Replace(eppChart, "[--pool-name, pool, --config-file, /config/default-plugins.yaml, --ha-enable-leader-election,",
		`[--pool-name, pool, "--config-text=plugins: [{type: queue-scorer}]",`, 1)
	out, err := postrender.Render([]byte(chart), postrender.Options{
		Image: image, Membership: "ready", PortName: "gossip", Port: 7000, DebugPort: 7001,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := at(manifests(t, out)["Deployment/rel-epp"], "spec", "template", "spec", "containers", 0).(map[string]any)
	text := strings.TrimPrefix(at(c, "args", 2).(string), "--config-text=")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("--config-text is not YAML: %v", err)
	}
	if named(cfg["plugins"], postrender.PluginName) == nil || at(cfg, "plugins", 0, "type") != "queue-scorer" {
		t.Errorf("--config-text plugins = %v", cfg["plugins"])
	}
	for name, want := range map[string]string{"EPP_PEER_PORT_NAME": "gossip", "EPP_PEER_PORT": "7000", "EPP_PEER_DEBUG_ADDRESS": ":7001"} {
		if e := named(c["env"], name); e == nil || e["value"] != want {
			t.Errorf("env %s = %v, want %s", name, e, want)
		}
	}
	if named(c["env"], "EPP_PEER_MEMBERSHIP") != nil {
		t.Error("membership ready is the plugin's default: no env expected")
	}
	if p := named(c["ports"], "gossip"); p == nil || p["containerPort"] != float64(7000) {
		t.Errorf("port gossip = %v", p)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, chart string
		opts        postrender.Options
		want        string
	}{
		{"upstream image kept", eppChart, postrender.Options{}, "pass --image="},
		{"no EPP container", eppChart, postrender.Options{Image: image, Container: "router"}, `no Deployment or StatefulSet with a container named "router"`},
		{"bad membership", eppChart, postrender.Options{Image: image, Membership: "all"}, `--membership="all"`},
		{"unknown Service", eppChart, postrender.Options{Image: image, Service: "nope"}, "--service=nope: no such Service"},
		{"no Service", strings.Replace(eppChart, "selector: {app: rel-epp}", "selector: {app: other}", 1), postrender.Options{Image: image}, "no Service selects the pods of rel-epp"},
		{"no configuration", strings.Replace(eppChart, "--config-file, /config/default-plugins.yaml,", "", 1), postrender.Options{Image: image}, "reads no configuration"},
		{"configuration elsewhere", strings.Replace(eppChart, "/config/default-plugins.yaml", "/etc/epp/x.yaml", 1), postrender.Options{Image: image}, "no volume of the EPP container is mounted at /etc/epp"},
		{"another peer discovery", strings.Replace(eppChart, "    plugins:\n    - type: queue-scorer\n", "    dataLayer: {peerDiscovery: {pluginRef: mine}}\n    plugins:\n    - type: queue-scorer\n", 1), postrender.Options{Image: image}, "pluginRef is mine already"},
		{"port taken differently", strings.Replace(eppChart, "- {name: grpc, containerPort: 9002}", "- {name: http-peers, containerPort: 8000}", 1), postrender.Options{Image: image}, "ports http-peers is set already"},
		{"not YAML", "kind: [", postrender.Options{Image: image}, "reading the manifests"},
		// Port numbers the plugin takes, held under another name: the API server
		// would refuse the Service only once the rest was applied, and would never
		// see the pod's clash (the EPP would fail to bind).
		{"Service port on the debug port", strings.Replace(eppChart, "  - {name: grpc-ext-proc, port: 9002}", "  - {name: grpc-ext-proc, port: 9002}\n  - {name: metrics-x, port: 9091}", 1),
			postrender.Options{Image: image}, "--debug-port=9091: Service rel-epp already has port 9091 (metrics-x): pick another --debug-port"},
		{"EPP port on the peer port", strings.Replace(eppChart, "- {name: grpc, containerPort: 9002}", "- {name: grpc, containerPort: 9002}\n        - {name: metrics, containerPort: 9005}", 1),
			postrender.Options{Image: image}, "--port=9005: container epp of rel-epp already has port 9005 (metrics): pick another --port"},
		{"a sidecar on the debug port", strings.Replace(eppChart, "      containers:\n      - name: epp\n", "      containers:\n      - {name: proxy, image: envoy, ports: [{name: admin, containerPort: 9091}]}\n      - name: epp\n", 1),
			postrender.Options{Image: image}, "--debug-port=9091: container proxy of rel-epp already has port 9091 (admin)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := postrender.Render([]byte(tc.chart), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func equal(a, b any) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return string(ja) == string(jb)
}

// TestPortsOfAnotherProtocolAreNoClash: a UDP port on the plugin's number is another
// port, on the Service as in the pod.
func TestPortsOfAnotherProtocolAreNoClash(t *testing.T) {
	chart := strings.Replace(eppChart, "  - {name: grpc-ext-proc, port: 9002}", "  - {name: grpc-ext-proc, port: 9002}\n  - {name: stats, port: 9091, protocol: UDP}", 1)
	chart = strings.Replace(chart, "- {name: grpc, containerPort: 9002}", "- {name: grpc, containerPort: 9002}\n        - {name: stats, containerPort: 9005, protocol: UDP}", 1)
	if _, err := postrender.Render([]byte(chart), postrender.Options{Image: image}); err != nil {
		t.Fatal(err)
	}
}

// TestHelmTestHook: with HelmTest (the Helm 4 plugin's --helm-test) the release gets a
// `helm test` Pod that runs epp check-peers against the peer Service with the
// replicas' membership (alive under upstream's leader election), beside the EPP's
// image; without it, or without an epp image to run, none.
func TestHelmTestHook(t *testing.T) {
	out, err := postrender.Render([]byte(eppChart), postrender.Options{Image: "reg.example/team/llm-d-router-epp:1.2.3", HelmTest: true})
	if err != nil {
		t.Fatal(err)
	}
	pod := manifests(t, out)["Pod/rel-epp-test-peers"]
	if pod == nil {
		t.Fatalf("no test hook Pod rel-epp-test-peers:\n%s", out)
	}
	if at(pod, "metadata", "annotations", "helm.sh/hook") != "test" || at(pod, "metadata", "namespace") != "ns1" ||
		at(pod, "spec", "serviceAccountName") != "rel-epp" || at(pod, "spec", "restartPolicy") != "Never" {
		t.Fatalf("hook %v", pod)
	}
	c := at(pod, "spec", "containers", 0)
	if at(c, "image") != "reg.example/team/epp:1.2.3" {
		t.Errorf("hook image %v, want epp beside the EPP's image", at(c, "image"))
	}
	want := []any{"check-peers", "--service=rel-epp", "--namespace=ns1", "--port-name=http-peers", "--membership=alive", "--timeout=60s"}
	if !equal(at(c, "args"), want) {
		t.Errorf("hook args %v, want %v", at(c, "args"), want)
	}
	if l := at(pod, "metadata", "labels", "app"); l != nil {
		t.Errorf("the hook carries the Service's selector label app=%v: it would be an endpoint", l)
	}
	for _, o := range []postrender.Options{
		{Image: "reg.example/team/llm-d-router-epp:1.2.3"},
		{Image: "reg.example/my-epp:1.0", HelmTest: true},
	} {
		out, err := postrender.Render([]byte(eppChart), o)
		if err != nil {
			t.Fatal(err)
		}
		if manifests(t, out)["Pod/rel-epp-test-peers"] != nil {
			t.Errorf("options %+v: a test hook", o)
		}
	}
	out, err = postrender.Render([]byte(eppChart), postrender.Options{Image: "reg.example/my-epp:1.0", HelmTest: true, TestImage: "reg.example/epp:9"})
	if err != nil {
		t.Fatal(err)
	}
	if img := at(manifests(t, out)["Pod/rel-epp-test-peers"], "spec", "containers", 0, "image"); img != "reg.example/epp:9" {
		t.Errorf("--test-image: hook image %v", img)
	}
}
