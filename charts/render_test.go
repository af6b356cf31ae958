package charts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// rendered indexes a rendering's objects by kind.
type rendered struct {
	objs []client.Object
}

func (r rendered) keys() []string {
	var out []string
	for _, o := range r.objs {
		out = append(out, render.Key(o))
	}
	return out
}

func only[T client.Object](t *testing.T, r rendered) T {
	t.Helper()
	var found []T
	for _, o := range r.objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T, rendering has %v", zero, r.keys())
	}
	return found[0]
}

func count[T client.Object](r rendered) int {
	n := 0
	for _, o := range r.objs {
		if _, ok := o.(T); ok {
			n++
		}
	}
	return n
}

func appVersion(t *testing.T) string {
	t.Helper()
	v, err := render.ChartAppVersion()
	if err != nil || v == "" {
		t.Fatalf("the chart's appVersion: %q, %v", v, err)
	}
	return v
}

func renderChart(t *testing.T, values map[string]any) rendered {
	t.Helper()
	objs, err := render.HelmObjects("epp", "team-a", values)
	if err != nil {
		t.Fatalf("rendering with %v: %v", values, err)
	}
	return rendered{objs: objs}
}

// peerRule is the Role of the replica contract (internal/contract).
var peerRule = contract.For(contract.Options{}).Rules

// TestRenderingsMeetTheReplicaContract: with peer discovery on (EndpointSlices, the
// chart's default source), the chart renders what internal/contract declares that a
// replica needs, for the defaults and for each of the contract's choices set
// otherwise: the env, the container's and the Service's ports, and the Role.
func TestRenderingsMeetTheReplicaContract(t *testing.T) {
	on := "router.epp.peerDiscovery.enabled"
	for _, tc := range []struct {
		values map[string]any
		want   contract.Options
	}{
		{vals(on, true), contract.Options{Service: "epp"}},
		{vals(on, true, "router.epp.peerDiscovery.portName", "state-sync", "router.epp.peerDiscovery.port", 7000, "router.epp.peerDiscovery.debugPort", 7001),
			contract.Options{Service: "epp", PortName: "state-sync", Port: 7000, DebugPort: 7001}},
		{vals(on, true, "router.epp.peerDiscovery.membership", "alive"), contract.Options{Service: "epp", Membership: peers.MembershipAlive}},
		{vals(on, true, "router.epp.stateSync.enabled", true), contract.Options{Service: "epp"}},
	} {
		r := renderChart(t, tc.values)
		for _, s := range render.ShortOfContract(r.objs, tc.want) {
			t.Errorf("%v: %s", tc.values, s)
		}
	}
}

func envNames(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	return out
}

func portsOf(c corev1.Container) map[string]int32 {
	out := map[string]int32{}
	for _, p := range c.Ports {
		out[p.Name] = p.ContainerPort
	}
	return out
}

func servicePorts(s *corev1.Service) map[string]int32 {
	out := map[string]int32{}
	for _, p := range s.Spec.Ports {
		out[p.Name] = p.Port
		if p.TargetPort.StrVal != p.Name {
			out[p.Name+"->"+p.TargetPort.String()] = p.Port
		}
	}
	return out
}

// eppArgs are the args of llm-d-router's EPP with the chart's defaults: peer
// discovery never adds a flag; metrics auth is on, as upstream's default.
var eppArgs = []string{"--config-file=/config/default-plugins.yaml", "--endpoint-selector=app.kubernetes.io/component=model-server",
	"--endpoint-target-ports=8000", "--grpc-port=9002", "--grpc-health-port=9003", "--metrics-port=9090", "--metrics-endpoint-auth=true",
	"--zap-encoder=json", "--tracing=false"}

// pluginConfig is the EPP configuration the EPP reads, decoded.
func pluginConfig(t *testing.T, r rendered) map[string]any {
	t.Helper()
	cm := only[*corev1.ConfigMap](t, r)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["default-plugins.yaml"]), &cfg); err != nil {
		t.Fatalf("default-plugins.yaml: %v", err)
	}
	return cfg
}

// peerPlugin is the configuration's peer-discovery plugin entry and the pluginRef
// ("" when there is none).
func peerPlugin(t *testing.T, r rendered) (entry map[string]any, ref string) {
	t.Helper()
	cfg := pluginConfig(t, r)
	for _, p := range cfg["plugins"].([]any) {
		if m := p.(map[string]any); m["name"] == "peer-discovery" {
			entry = m
		}
	}
	if dl, ok := cfg["dataLayer"].(map[string]any); ok {
		if pd, ok := dl["peerDiscovery"].(map[string]any); ok {
			ref, _ = pd["pluginRef"].(string)
		}
	}
	return entry, ref
}

func TestRender(t *testing.T) {
	onEnv := []string{"EPP_PEER_SERVICE=epp", "EPP_PEER_DEBUG_ADDRESS=:9091"}
	tests := []struct {
		name        string
		values      map[string]any
		wantArgs    []string
		peerPort    map[string]int32 // the peer ports by name, nil when off
		pluginEnv   []string         // NAME=value of the plugin's env, before the identity
		pluginType  string
		wantPDB     bool
		wantReplica int32
		wantEnv     []string
		check       func(t *testing.T, r rendered)
	}{
		{name: "default: peer discovery off", values: nil, wantArgs: eppArgs, wantPDB: true, wantReplica: 3},
		{name: "enabled", values: vals("router.epp.peerDiscovery.enabled", true), wantArgs: eppArgs,
			peerPort: map[string]int32{"peer-sync": 9005, "http-peers": 9091}, pluginEnv: onEnv, pluginType: "endpointslice-peer-discovery", wantPDB: true, wantReplica: 3},
		{name: "enabled with custom serviceName, portName, port and debugPort",
			values: vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.serviceName", "epp-peers",
				"router.epp.peerDiscovery.portName", "state-sync", "router.epp.peerDiscovery.port", 7000, "router.epp.peerDiscovery.debugPort", 7001),
			wantArgs: eppArgs, peerPort: map[string]int32{"state-sync": 7000, "http-peers": 7001}, pluginType: "endpointslice-peer-discovery",
			pluginEnv: []string{"EPP_PEER_SERVICE=epp-peers", "EPP_PEER_PORT_NAME=state-sync", "EPP_PEER_PORT=7000", "EPP_PEER_DEBUG_ADDRESS=:7001"},
			wantPDB:   true, wantReplica: 3},
		{name: "enabled with membership alive and probing",
			values:   vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.membership", "alive", "router.epp.peerDiscovery.probeInterval", "5s"),
			wantArgs: eppArgs, peerPort: map[string]int32{"peer-sync": 9005, "http-peers": 9091}, pluginType: "endpointslice-peer-discovery",
			pluginEnv: []string{"EPP_PEER_SERVICE=epp", "EPP_PEER_MEMBERSHIP=alive", "EPP_PEER_DEBUG_ADDRESS=:9091", "EPP_PEER_SYNC_ADDRESS=:9005", "EPP_PEER_PROBE_INTERVAL=5s"},
			wantPDB:   true, wantReplica: 3},
		{name: "source dns: a headless peer Service, no Role", values: vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.source", "dns"),
			wantArgs: eppArgs, peerPort: map[string]int32{"peer-sync": 9005, "http-peers": 9091}, pluginType: "dns-peer-discovery",
			pluginEnv: []string{"EPP_PEER_DNS_SERVICE=epp-peers", "EPP_PEER_DEBUG_ADDRESS=:9091"}, wantPDB: true, wantReplica: 3,
			check: func(t *testing.T, r rendered) {
				var headless *corev1.Service
				for _, o := range r.objs {
					if s, ok := o.(*corev1.Service); ok && s.Name == "epp-peers" {
						headless = s
					}
				}
				if headless == nil || headless.Spec.ClusterIP != "None" || headless.Spec.PublishNotReadyAddresses ||
					headless.Spec.Selector["app.kubernetes.io/instance"] != "epp" || len(headless.Spec.Ports) != 1 || headless.Spec.Ports[0].Name != "peer-sync" {
					t.Fatalf("headless peer Service %+v", headless)
				}
			}},
		{name: "membership without peer discovery renders nothing", values: vals("router.epp.peerDiscovery.membership", "alive"),
			wantArgs: eppArgs, wantPDB: true, wantReplica: 3},
		{name: "replicas 1: no PodDisruptionBudget", values: vals("router.epp.replicas", 1),
			wantArgs: eppArgs, wantPDB: false, wantReplica: 1},
		{name: "PodDisruptionBudget switched off", values: vals("router.epp.podDisruptionBudget.enabled", false),
			wantArgs: eppArgs, wantPDB: false, wantReplica: 3},
		{name: "leader election: the flag and the leases",
			values:   vals("router.epp.leaderElection", true),
			wantArgs: append(slices.Clone(eppArgs), "--ha-enable-leader-election"), wantPDB: true, wantReplica: 3,
			check: func(t *testing.T, r rendered) {
				for _, o := range r.objs {
					if role, ok := o.(*rbacv1.Role); ok && role.Name == "epp" {
						for _, rule := range role.Rules {
							if slices.Contains(rule.Resources, "leases") && slices.Contains(rule.Verbs, "update") {
								return
							}
						}
					}
				}
				t.Fatal("leader election without a leases rule")
			}},
		{name: "an InferencePool instead of the endpoint selector",
			values: vals("router.inferencePool.name", "pool-a"),
			wantArgs: []string{"--config-file=/config/default-plugins.yaml", "--pool-name=pool-a", "--pool-namespace=team-a", "--pool-group=inference.networking.k8s.io",
				"--grpc-port=9002", "--grpc-health-port=9003", "--metrics-port=9090", "--metrics-endpoint-auth=true", "--zap-encoder=json", "--tracing=false"}, wantPDB: true, wantReplica: 3},
		{name: "extra env with valueFrom",
			values: vals("router.epp.env", []any{
				map[string]any{"name": "HF_TOKEN", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "hf", "key": "token"}}},
				map[string]any{"name": "MODE", "value": "fast"},
			}),
			wantArgs: eppArgs, wantPDB: true, wantReplica: 3, wantEnv: []string{"HF_TOKEN", "MODE"},
			check: func(t *testing.T, r rendered) {
				c := only[*appsv1.Deployment](t, r).Spec.Template.Spec.Containers[0]
				e := c.Env[4]
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "hf" || e.ValueFrom.SecretKeyRef.Key != "token" {
					t.Fatalf("HF_TOKEN env = %+v, want a secretKeyRef hf/token", e)
				}
			}},
		{name: "user flags and args, after the chart's, with peer discovery on",
			values: vals("router.epp.peerDiscovery.enabled", true, "router.epp.flags", map[string]any{"zap-log-level": "debug", "tracing": false, "v": 2},
				"router.epp.args", []any{"--drain-timeout=10s"}),
			// flags.tracing takes the place of the chart's --tracing.
			wantArgs: append(slices.Clone(eppArgs[:len(eppArgs)-1]), "--tracing=false", "--v=2", "--zap-log-level=debug", "--drain-timeout=10s"),
			peerPort: map[string]int32{"peer-sync": 9005, "http-peers": 9091}, pluginEnv: onEnv, pluginType: "endpointslice-peer-discovery", wantPDB: true, wantReplica: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, tc.values)
			enabled := tc.peerPort != nil
			slicesSource := tc.pluginType == "endpointslice-peer-discovery"

			// Kinds and names.
			want := []string{"ClusterRoleBinding//epp-team-a-metrics-auth", "ConfigMap/team-a/epp-config", "Deployment/team-a/epp", "Role/team-a/epp", "RoleBinding/team-a/epp", "Service/team-a/epp", "ServiceAccount/team-a/epp"}
			if tc.wantPDB {
				want = append(want, "PodDisruptionBudget/team-a/epp")
			}
			if slicesSource {
				want = append(want, "Role/team-a/epp-peer-discovery", "RoleBinding/team-a/epp-peer-discovery")
			}
			if tc.pluginType == "dns-peer-discovery" {
				want = append(want, "Service/team-a/epp-peers")
			}
			slices.Sort(want)
			got := r.keys()
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("objects (-want +got):\n%s", diff)
			}

			// RBAC: the exact peer rule iff discovery reads slices, bound to the chart's
			// ServiceAccount; never cluster-wide.
			for _, o := range r.objs {
				switch o := o.(type) {
				case *rbacv1.Role:
					if o.Name == "epp-peer-discovery" {
						if diff := cmp.Diff(peerRule, o.Rules); diff != "" {
							t.Fatalf("peer Role rules (-want +got):\n%s", diff)
						}
					}
					for _, rule := range o.Rules {
						if slices.Contains(rule.Resources, "endpointslices") && o.Name != "epp-peer-discovery" {
							t.Fatalf("Role %s grants endpointslices", o.Name)
						}
					}
				case *rbacv1.RoleBinding:
					if o.RoleRef.Kind != "Role" || o.RoleRef.Name != o.Name ||
						len(o.Subjects) != 1 || o.Subjects[0].Kind != "ServiceAccount" || o.Subjects[0].Name != "epp" || o.Subjects[0].Namespace != "team-a" {
						t.Fatalf("RoleBinding %+v does not bind %s to ServiceAccount team-a/epp", o, o.Name)
					}
				}
			}
			// Cluster-wide only what metrics auth needs: the EPP's ServiceAccount bound
			// to system:auth-delegator (TokenReviews, SubjectAccessReviews).
			if n := count[*rbacv1.ClusterRole](r); n != 0 {
				t.Fatalf("%d ClusterRoles rendered", n)
			}
			crb := only[*rbacv1.ClusterRoleBinding](t, r)
			if crb.RoleRef.Name != "system:auth-delegator" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "epp" || crb.Subjects[0].Namespace != "team-a" {
				t.Fatalf("ClusterRoleBinding %s: %+v -> %+v, want system:auth-delegator for team-a/epp", crb.Name, crb.Subjects, crb.RoleRef)
			}

			// The EPP configuration: the plugin and its pluginRef iff enabled.
			entry, ref := peerPlugin(t, r)
			if enabled != (entry != nil) || (enabled && (entry["type"] != tc.pluginType || ref != "peer-discovery" || entry["parameters"] != nil)) {
				t.Fatalf("EPP configuration: plugin %v, pluginRef %q; want %s (no parameters: they come from the env) iff enabled", entry, ref, tc.pluginType)
			}

			dep := only[*appsv1.Deployment](t, r)
			if *dep.Spec.Replicas != tc.wantReplica {
				t.Fatalf("replicas %d, want %d", *dep.Spec.Replicas, tc.wantReplica)
			}
			pod := dep.Spec.Template.Spec
			if pod.ServiceAccountName != "epp" {
				t.Fatalf("serviceAccountName %q", pod.ServiceAccountName)
			}
			if got := pod.AutomountServiceAccountToken; got == nil || !*got {
				t.Fatalf("automountServiceAccountToken %v, want true (llm-d-router's EPP reads its model server pods)", got)
			}
			if dep.Spec.Template.Annotations["checksum/config"] == "" {
				t.Fatal("no checksum/config annotation: a new configuration would not roll the pods")
			}
			c := pod.Containers[0]
			if diff := cmp.Diff(tc.wantArgs, c.Args); diff != "" {
				t.Fatalf("args (-want +got):\n%s", diff)
			}
			if c.Image != "epp-peer-discovery/llm-d-router-epp:"+appVersion(t) || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Fatalf("image %s %s", c.Image, c.ImagePullPolicy)
			}

			// The plugin's env, then the downward-API identity, then the user's.
			var gotPlugin []string
			for _, e := range c.Env[:len(tc.pluginEnv)] {
				gotPlugin = append(gotPlugin, e.Name+"="+e.Value)
			}
			if diff := cmp.Diff(tc.pluginEnv, gotPlugin); len(tc.pluginEnv) > 0 && diff != "" {
				t.Fatalf("plugin env (-want +got):\n%s", diff)
			}
			rest := c.Env[len(tc.pluginEnv):]
			if diff := cmp.Diff(append([]string{"POD_IP", "POD_IPS", "POD_NAME", "NAMESPACE"}, tc.wantEnv...), envNames(corev1.Container{Env: rest})); diff != "" {
				t.Fatalf("env (-want +got):\n%s", diff)
			}
			for i, path := range []string{"status.podIP", "status.podIPs", "metadata.name", "metadata.namespace"} {
				if f := rest[i].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != path {
					t.Fatalf("env %s is not fieldRef %s", rest[i].Name, path)
				}
			}

			// Ports: container and Service, the peer ports iff enabled.
			wantContainer := map[string]int32{"grpc-ext-proc": 9002, "grpc-health": 9003, "http-metrics": 9090}
			wantService := map[string]int32{"grpc-ext-proc": 9002, "http-metrics": 9090}
			for name, port := range tc.peerPort {
				wantContainer[name], wantService[name] = port, port
			}
			if diff := cmp.Diff(wantContainer, portsOf(c)); diff != "" {
				t.Fatalf("container ports (-want +got):\n%s", diff)
			}
			var svc *corev1.Service
			for _, o := range r.objs {
				if s, ok := o.(*corev1.Service); ok && s.Name == "epp" {
					svc = s
				}
			}
			if diff := cmp.Diff(wantService, servicePorts(svc)); diff != "" {
				t.Fatalf("Service ports (-want +got, name->target when they differ):\n%s", diff)
			}

			// Probes: the EPP's gRPC health.
			if p := c.ReadinessProbe; p == nil || p.GRPC == nil || p.GRPC.Port != 9003 || p.GRPC.Service == nil || *p.GRPC.Service != "readiness" || p.HTTPGet != nil {
				t.Fatalf("readiness probe %+v", c.ReadinessProbe)
			}
			if p := c.LivenessProbe; p == nil || p.GRPC == nil || p.GRPC.Service == nil || *p.GRPC.Service != "liveness" || p.HTTPGet != nil {
				t.Fatalf("liveness probe %+v", c.LivenessProbe)
			}

			// Restricted security.
			psc, sc := pod.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Fatalf("pod security context %+v", psc)
			}
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
				t.Fatalf("container security context %+v", sc)
			}

			if tc.wantPDB {
				pdb := only[*policyv1.PodDisruptionBudget](t, r)
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Fatalf("PDB maxUnavailable %v", pdb.Spec.MaxUnavailable)
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestReleaseNaming(t *testing.T) {
	objs, err := render.HelmObjects("router", "team-a", vals("router.epp.peerDiscovery.enabled", true))
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objs: objs}
	dep := only[*appsv1.Deployment](t, r)
	if env := dep.Spec.Template.Spec.Containers[0].Env[0]; dep.Name != "router-epp" || env.Name != "EPP_PEER_SERVICE" || env.Value != "router-epp" {
		t.Fatalf("release router: Deployment %s env %v; EPP_PEER_SERVICE must name the chart's own Service", dep.Name, env)
	}
	if svc := only[*corev1.Service](t, r); svc.Name != "router-epp" {
		t.Fatalf("Service %s", svc.Name)
	}
}

func TestPassthroughScheduling(t *testing.T) {
	r := renderChart(t, vals(
		"router.epp.nodeSelector", map[string]any{"pool": "cpu"},
		"router.epp.tolerations", []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
		"router.epp.topologySpreadConstraints", []any{map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
		"router.epp.affinity", map[string]any{"podAntiAffinity": map[string]any{}},
	))
	pod := only[*appsv1.Deployment](t, r).Spec.Template.Spec
	if pod.NodeSelector["pool"] != "cpu" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.Affinity == nil {
		t.Fatalf("scheduling passthrough lost: %+v", pod)
	}
	if len(pod.TopologySpreadConstraints) != 1 {
		t.Fatalf("topologySpreadConstraints %+v", pod.TopologySpreadConstraints)
	}
	sel := pod.TopologySpreadConstraints[0].LabelSelector
	if sel == nil || sel.MatchLabels["app.kubernetes.io/instance"] != "epp" || sel.MatchLabels["app.kubernetes.io/name"] != "epp" {
		t.Fatalf("topologySpreadConstraints without a selector must default to the pod labels, got %+v", sel)
	}
}

func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"unknown key under peerDiscovery", vals("router.epp.peerDiscovery.enable", true), []string{"peerDiscovery", "enable"}},
		{"enabled as a string", vals("router.epp.peerDiscovery.enabled", "yes"), []string{"peerDiscovery", "enabled", "boolean"}},
		{"replicas 0", vals("router.epp.replicas", 0), []string{"replicas", "minimum"}},
		{"port 70000", vals("router.epp.peerDiscovery.port", 70000), []string{"peerDiscovery/port", "maximum"}},
		{"port 0", vals("router.epp.peerDiscovery.port", 0), []string{"peerDiscovery", "port"}},
		{"metrics port 70000", vals("router.epp.ports.metrics", 70000), []string{"ports", "metrics"}},
		{"service name with capitals", vals("router.epp.peerDiscovery.serviceName", "EPP"), []string{"serviceName"}},
		{"port name too long", vals("router.epp.peerDiscovery.portName", "a-very-long-port-name"), []string{"portName"}},
		{"unknown key under router.epp", vals("router.epp.replica", 3), []string{"replica"}},
		{"membership not ready or alive", vals("router.epp.peerDiscovery.membership", "leader"), []string{"membership"}},
		{"unknown mode", vals("router.epp.peerDiscovery.mode", "side"), []string{"mode"}},
		{"unknown key under the sidecar", vals("router.epp.peerDiscovery.sidecar.port", 9091), []string{"sidecar", "port"}},
		{"serviceAccount.create as a string", vals("router.epp.serviceAccount.create", "yes"), []string{"create", "boolean"}},
		{"nameOverride with capitals", vals("router.epp.nameOverride", "EPP"), []string{"nameOverride"}},
		{"serviceMonitor interval without a unit", vals("router.epp.serviceMonitor.interval", "30"), []string{"interval"}},
		{"extra volume without a name", vals("router.epp.extraVolumes", []any{map[string]any{"emptyDir": map[string]any{}}}), []string{"extraVolumes", "name"}},
		{"env without name", vals("router.epp.env", []any{map[string]any{"value": "x"}}), []string{"env", "name"}},
		{"pull policy typo", vals("router.epp.image.pullPolicy", "IfNotPresnt"), []string{"pullPolicy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := render.Helm("epp", "team-a", tc.values)
			if err == nil {
				t.Fatalf("values %v were accepted", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestSchemaAcceptsNullForOptionalFields(t *testing.T) {
	for _, key := range []string{"serviceName"} {
		if _, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery."+key, nil, "router.epp.peerDiscovery.enabled", true)); err != nil {
			t.Errorf("peerDiscovery.%s: null rejected: %v", key, err)
		}
	}
	for _, key := range []string{"env", "flags", "resources", "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "podAnnotations", "imagePullSecrets"} {
		if _, _, err := render.Helm("epp", "team-a", vals("router.epp."+key, nil)); err != nil {
			t.Errorf("router.epp.%s: null rejected: %v", key, err)
		}
	}
}

func TestManagedFlagsAreRefused(t *testing.T) {
	for _, flag := range []string{"config-file", "metrics-port", "endpoint-selector", "ha-enable-leader-election"} {
		_, _, err := render.Helm("epp", "team-a", vals("router.epp.flags", map[string]any{flag: "x"}))
		if err == nil || !strings.Contains(err.Error(), "router.epp.flags."+flag) || !strings.Contains(err.Error(), "set by the chart") {
			t.Errorf("a managed flag in router.epp.flags (%s): %v", flag, err)
		}
	}
}

func TestNotes(t *testing.T) {
	_, off, err := render.Helm("epp", "team-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, on, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true))
	if err != nil {
		t.Fatal(err)
	}
	_, sidecar, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ notes, want string }{
		{off, "Peer discovery is OFF"}, {off, "router.epp.peerDiscovery.enabled=true"},
		{on, "Peer discovery is ON"}, {on, "EndpointSlices of Service epp\n"}, {on, "kubectl port-forward -n team-a"}, {on, "curl -s localhost:9091/debug/peers"},
		{on, "helm test epp -n team-a"},
		{sidecar, "in a sidecar"}, {sidecar, "/var/run/epp-peers/peers.json"}, {sidecar, "curl -s localhost:9091/debug/peers"},
	} {
		if !strings.Contains(c.notes, c.want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", c.want, c.notes)
		}
	}
}
