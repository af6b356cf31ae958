// Package upstreamparity compares the EPP container that a channel of this project
// deploys (the chart, the kustomize base, the Terraform module) with the one
// llm-d-router's own chart (llm-d-router-standalone, from the pinned upstream tree)
// renders for the same settings: args, env, ports, probes, security context and
// resources, field by field, as the API server stores them. Every difference must
// be one of Known, the one list of them, each with its reason; the chart's README
// shows that list (Markdown, written by `make docs`).
package upstreamparity

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// Known is a field of the EPP container in which this project's channels may
// differ from upstream's chart, and why.
type Known struct {
	// Field is a Difference's Field, a prefix of it ending before a "." or "[" (e.g.
	// "resources" covers "resources.requests.cpu"), or a prefix ending in "*"
	// ("env EPP_PEER_*").
	Field string
	// Reason says why; the chart's README shows it.
	Reason string
}

// KnownDifferences are all the ways our EPP container may differ from upstream's
// chart's with the same values: the one list, which the parity tests of the chart,
// kustomize and Terraform check against and the chart's README shows. An entry that
// no case needs any more fails the chart's test: keep it short and current.
var KnownDifferences = []Known{
	{"args --grpc-port", "set explicitly from `router.epp.ports.extProc` (upstream leaves the EPP's default, 9002, which is this chart's default too)"},
	{"args --metrics-port", "set explicitly from `router.epp.ports.metrics` (upstream leaves the EPP's default, 9090, which is this chart's default too)"},
	{"args --metrics-endpoint-auth", "always rendered (upstream renders it only when false); the kustomize base has `false`, since the ClusterRoleBinding that auth needs must name the overlay's namespace (component `metrics-auth` turns it on)"},
	{"args --ha-enable-leader-election", "active-active replicas that share state: leader election only with `router.epp.leaderElection` (upstream turns it on whenever `replicas` > 1)"},
	{"env POD_IP", "the replica's identity for peer discovery (downward API, always set)"},
	{"env POD_IPS", "the replica's identity for peer discovery, dual-stack (downward API, always set)"},
	{"env EPP_PEER_*", "with peer discovery on (`router.epp.peerDiscovery`, `stateSync`, this project's): the plugins' settings, which they read from the env (the configuration file stays the same whatever the values)"},
	{"ports[9005]", "with peer discovery on: `peer-sync`, where the peers' state sync connects (and probes reach)"},
	{"ports[9091]", "with peer discovery on: `http-peers`, where the plugin serves `/debug/peers` and `/debug/peer-sync`"},
	{"ports[9002].name", "`grpc-ext-proc`, the name of the Service port that targets it (upstream's Service uses that name too; its container port is `grpc`)"},
	{"ports[9090].name", "`http-metrics`, the name of the Service port that targets it (upstream's Service uses that name too; its container port is `metrics`)"},
	{"livenessProbe.grpc.service", "`liveness` whatever the replica count, as upstream's chart with several replicas (with `router.epp.leaderElection` a standby stays live); upstream's one-replica `inference-extension` is a name the EPP does not know, answered as overall health only without leader election"},
	{"readinessProbe.grpc.service", "`readiness` whatever the replica count, as upstream's chart with several replicas: it also waits for the plugins' readiness (peer discovery's) and, with leader election, passes on the leader only; upstream's one-replica `inference-extension` skips the plugins"},
	{"securityContext", "restricted pod security (non-root, no privilege escalation, all capabilities dropped, read-only root); upstream sets none"},
	{"resources", "smaller default requests (100m CPU, 128Mi, limit 1Gi; upstream: 8 CPUs, 8Gi, limit 16Gi); `router.epp.resources` sets them in both"},
}

// Difference is one field in which two EPP containers differ.
type Difference struct {
	// Field names it: "args --name" (a flag), "env NAME", "ports[<number>].<field>",
	// or a path such as "livenessProbe.grpc.service" or "resources.requests.cpu".
	Field string
	// Upstream and Ours are its values, as JSON (a flag: the argument as rendered,
	// "--name=value"); "" where the container has none.
	Upstream, Ours string
}

func (d Difference) String() string {
	show := func(v string) string {
		if v == "" {
			return "(none)"
		}
		return v
	}
	return fmt.Sprintf("%s: upstream %s, ours %s", d.Field, show(d.Upstream), show(d.Ours))
}

// Compare returns the fields in which the EPP containers differ, sorted by field.
// Args are compared as flags ("--name value" and "--name=value" alike), env by
// name, ports by number, so that order does not count.
func Compare(upstream, ours *corev1.Container) []Difference {
	u, o := fields(upstream), fields(ours)
	keys := slices.Sorted(maps.Keys(u))
	for k := range o {
		if _, ok := u[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []Difference
	for _, k := range keys {
		if u[k] != o[k] {
			out = append(out, Difference{Field: k, Upstream: u[k], Ours: o[k]})
		}
	}
	return out
}

// Explain returns the reason of the known difference that covers d, or false.
func Explain(d Difference) (Known, bool) {
	for _, k := range KnownDifferences {
		prefix, wildcard := strings.CutSuffix(k.Field, "*")
		if d.Field == k.Field || strings.HasPrefix(d.Field, k.Field+".") || strings.HasPrefix(d.Field, k.Field+"[") || wildcard && strings.HasPrefix(d.Field, prefix) {
			return k, true
		}
	}
	return Known{}, false
}

// Unlisted returns the differences that no entry of KnownDifferences covers.
func Unlisted(diffs []Difference) []Difference {
	var out []Difference
	for _, d := range diffs {
		if _, ok := Explain(d); !ok {
			out = append(out, d)
		}
	}
	return out
}

// Unused returns the entries of KnownDifferences that cover none of diffs.
func Unused(diffs []Difference) []Known {
	var out []Known
	for _, k := range KnownDifferences {
		used := false
		for _, d := range diffs {
			if e, ok := Explain(d); ok && e.Field == k.Field {
				used = true
			}
		}
		if !used {
			out = append(out, k)
		}
	}
	return out
}

// The markers of the section of charts/epp/README.md.gotmpl (and so of README.md)
// that shows Markdown.
const (
	ReadmeBegin = "<!-- known-differences:begin (written by make docs from KnownDifferences in e2e/testsupport/upstreamparity) -->"
	ReadmeEnd   = "<!-- known-differences:end -->"
)

// Markdown is KnownDifferences as the table the chart's README shows.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| field of the EPP container | why it differs |\n|---|---|\n")
	for _, k := range KnownDifferences {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.Field, k.Reason)
	}
	return b.String()
}

// fields flattens the compared parts of a container into field -> JSON value.
func fields(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range Flags(c.Args) {
		name, _, _ := strings.Cut(a, "=")
		key := "args " + name
		if prev, ok := out[key]; ok {
			a = prev + " " + a // a repeated flag: all of them
		}
		out[key] = a
	}
	for _, e := range c.Env {
		out["env "+e.Name] = jsonOf(struct {
			Value     string               `json:"value,omitempty"`
			ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`
		}{e.Value, e.ValueFrom})
	}
	for _, p := range c.Ports {
		key := "ports[" + strconv.Itoa(int(p.ContainerPort)) + "]"
		flatten(out, key, p)
		delete(out, key+".containerPort") // in the key
	}
	flatten(out, "livenessProbe", c.LivenessProbe)
	flatten(out, "readinessProbe", c.ReadinessProbe)
	flatten(out, "startupProbe", c.StartupProbe)
	flatten(out, "securityContext", c.SecurityContext)
	flatten(out, "resources", c.Resources)
	return out
}

// Flags normalizes args: "--name value" pairs become "--name=value" (the EPP
// parses both alike; upstream's chart renders the former).
func Flags(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && len(out) > 0 && strings.HasPrefix(out[len(out)-1], "-") && !strings.Contains(out[len(out)-1], "=") {
			out[len(out)-1] += "=" + a
			continue
		}
		out = append(out, a)
	}
	return out
}

// flatten adds v's leaves (as JSON) under path to out, with dotted paths for
// object fields and [i] for list items.
func flatten(out map[string]string, path string, v any) {
	var generic any
	if err := json.Unmarshal([]byte(jsonOf(v)), &generic); err != nil {
		out[path] = "not JSON: " + err.Error()
		return
	}
	var walk func(string, any)
	walk = func(p string, x any) {
		switch x := x.(type) {
		case nil:
		case map[string]any:
			for k, v := range x {
				walk(p+"."+k, v)
			}
		case []any:
			for i, v := range x {
				walk(p+"["+strconv.Itoa(i)+"]", v)
			}
		default:
			out[p] = jsonOf(x)
		}
	}
	walk(path, generic)
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "not JSON: " + err.Error()
	}
	return string(b)
}

// Case is a setting the channels are compared in, as values of both charts.
type Case struct {
	Name string
	// Values returns the values both charts get (a new map each time).
	Values func() map[string]any
}

// Standalone returns the values of standalone mode (model servers by label, no
// InferencePool, no proxy) that every case starts from, with extra merged in
// (top-level keys of router.epp and router.tracing, by dotted path).
func Standalone(extra map[string]any) map[string]any {
	router := map[string]any{
		"inferencePool": map[string]any{"create": false},
		"proxy":         map[string]any{"enabled": false},
		"modelServers":  map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "model-server"}},
	}
	for path, v := range extra {
		parts := strings.Split(path, ".")
		cur := router
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		cur[parts[len(parts)-1]] = v
	}
	return map[string]any{"router": router}
}

// TracingOn are the values of tracing turned on with a collector and a sampler of
// a user's.
var TracingOn = map[string]any{
	"tracing.enabled":              true,
	"tracing.otelExporterEndpoint": "http://otel-collector.monitoring:4317",
	"tracing.sampling.sampler":     "parentbased_traceidratio",
	"tracing.sampling.samplerArg":  "0.25",
}

// Cases are the settings the chart is compared in: the defaults, tracing on, one
// and three replicas, peer discovery with state sync (and the shared prefix index),
// all in standalone mode.
var Cases = []Case{
	{"defaults", func() map[string]any { return Standalone(nil) }},
	{"tracing on", func() map[string]any { return Standalone(TracingOn) }},
	{"replicas 1", func() map[string]any { return Standalone(map[string]any{"epp.replicas": 1}) }},
	{"replicas 3", func() map[string]any { return Standalone(map[string]any{"epp.replicas": 3}) }},
	// Upstream's chart has no schema: it ignores this project's values.
	{"peer discovery and state sync", func() map[string]any {
		return Standalone(map[string]any{"epp.peerDiscovery.enabled": true, "epp.stateSync.enabled": true, "epp.stateSync.sharedPrefixIndex.enabled": true})
	}},
}

// EPP returns the Deployment's container named epp, or nil.
func EPP(d *appsv1.Deployment) *corev1.Container { return render.EPPContainer(d) }

// Stored returns d as the API server stores it, defaults applied (a probe's
// failureThreshold, a port's protocol, ...): a server-side dry run of its creation
// in namespace. An error fails the test.
func Stored(t testing.TB, cs kubernetes.Interface, namespace string, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	d = d.DeepCopy()
	d.Namespace, d.ResourceVersion = namespace, ""
	out, err := cs.AppsV1().Deployments(namespace).Create(context.Background(), d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("server-side dry run of Deployment %s: %v", d.Name, err)
	}
	return out
}

// Check compares the EPP containers of two Deployments as stored (see Stored) and
// fails the test, naming each difference that KnownDifferences does not list. It
// returns every difference, listed or not.
func Check(t testing.TB, what string, upstream, ours *appsv1.Deployment) []Difference {
	t.Helper()
	u, o := EPP(upstream), EPP(ours)
	if u == nil || o == nil {
		t.Fatalf("%s: no container epp (upstream %v, ours %v)", what, u != nil, o != nil)
	}
	diffs := Compare(u, o)
	if bad := Unlisted(diffs); len(bad) > 0 {
		var lines []string
		for _, d := range bad {
			lines = append(lines, "  "+d.String())
		}
		t.Errorf("%s: the EPP container differs from llm-d-router-standalone's where no known difference says why "+
			"(the list: KnownDifferences in e2e/testsupport/upstreamparity; a new entry needs its reason, and `make docs` puts it in charts/epp/README.md):\n%s",
			what, strings.Join(lines, "\n"))
	}
	return diffs
}
