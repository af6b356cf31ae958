package kustomize_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// view is what must be equal across channels for one object.
type view struct {
	Rules    []rbacv1.PolicyRule
	RoleRef  *rbacv1.RoleRef
	Subjects []rbacv1.Subject

	Replicas           *int32
	ServiceAccountName string
	AutomountToken     *bool
	PodSecurity        *corev1.PodSecurityContext
	Containers         []containerView
	InitContainers     []containerView
	Volumes            []corev1.Volume

	ServicePorts []corev1.ServicePort
	ServiceType  corev1.ServiceType

	MaxUnavailable string

	Config map[string]any // a ConfigMap's files, decoded

	PolicySelector *metav1.LabelSelector
	PolicyTypes    []networkingv1.PolicyType
	Ingress        []networkingv1.NetworkPolicyIngressRule
}

// containerView is what must be equal for one container.
type containerView struct {
	Name          string
	Image         string
	PullPolicy    corev1.PullPolicy
	RestartPolicy *corev1.ContainerRestartPolicy
	Flags         []string // args with "--flag value" normalized to "--flag=value"
	Env           []corev1.EnvVar
	Ports         []corev1.ContainerPort
	Probes        []*corev1.Probe
	Resources     *corev1.ResourceRequirements
	Security      *corev1.SecurityContext
	VolumeMounts  []corev1.VolumeMount
}

const (
	eppConfigFile = "(the file the EPP reads)"
	eppConfigFlag = "--config-file=/config/" + eppConfigFile
)

// eppConfigFileOf is the name of the file, in the ConfigMap mounted at /config,
// that the epp container's --config-file names ("" when none does).
func eppConfigFileOf(objs []client.Object) string {
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, f := range flags(c.Args) {
					if name, ok := strings.CutPrefix(f, "--config-file=/config/"); ok && c.Name == "epp" {
						return name
					}
				}
			}
		}
	}
	return ""
}

// containerViews compares ports as a set (kustomize's strategic merge puts added
// ports first).
func containerViews(cs []corev1.Container) []containerView {
	var out []containerView
	for _, c := range cs {
		c.Ports = slices.SortedFunc(slices.Values(c.Ports), func(a, b corev1.ContainerPort) int { return strings.Compare(a.Name, b.Name) })
		// The env as a set too: strategic merge puts added variables first, the chart
		// after its own, and nothing refers to another variable.
		c.Env = slices.SortedFunc(slices.Values(c.Env), func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
		c.VolumeMounts = slices.SortedFunc(slices.Values(c.VolumeMounts), func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
		fs := flags(c.Args)
		for i, f := range fs {
			if strings.HasPrefix(f, "--config-file=/config/") && c.Name == "epp" {
				fs[i] = eppConfigFlag
			}
		}
		out = append(out, containerView{
			Name: c.Name, Image: c.Image, PullPolicy: c.ImagePullPolicy, RestartPolicy: c.RestartPolicy, Flags: fs,
			Env: c.Env, Ports: c.Ports, Probes: []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe},
			Resources: &c.Resources, Security: c.SecurityContext, VolumeMounts: c.VolumeMounts,
		})
	}
	return out
}

// flags normalizes "--name value" pairs to "--name=value": the binary parses both the
// same way, and kustomize passes the Service name as its own argument so that name
// references can rewrite it.
func flags(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && len(out) > 0 && !strings.Contains(out[len(out)-1], "=") {
			out[len(out)-1] += "=" + a
			continue
		}
		out = append(out, a)
	}
	return out
}

// views are the objects' views. The ConfigMap that holds the file the EPP reads
// (its --config-file, which ../shared-scraping points at a file the state-sync
// components write beside default-plugins.yaml) shows that file alone, as
// eppConfigFile, and the EPP's --config-file flag is eppConfigFlag: what the
// EPP is configured with is compared, not which key of the ConfigMap holds it.
func views(objs []client.Object) map[string]view {
	out := map[string]view{}
	read := eppConfigFileOf(objs)
	for _, o := range objs {
		var v view
		switch o := o.(type) {
		case *rbacv1.Role:
			v.Rules = o.Rules
		case *rbacv1.RoleBinding:
			v.RoleRef, v.Subjects = &o.RoleRef, o.Subjects
		case *appsv1.Deployment:
			p := o.Spec.Template.Spec
			v.Replicas, v.ServiceAccountName, v.AutomountToken, v.PodSecurity = o.Spec.Replicas, p.ServiceAccountName, p.AutomountServiceAccountToken, p.SecurityContext
			// Volumes as a set too: strategic merge puts added ones first.
			v.Containers, v.InitContainers = containerViews(p.Containers), containerViews(p.InitContainers)
			v.Volumes = slices.SortedFunc(slices.Values(p.Volumes), func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
		case *corev1.Service:
			// As a set, in the order of names: components add ports in their order.
			v.ServicePorts = slices.SortedFunc(slices.Values(o.Spec.Ports), func(a, b corev1.ServicePort) int { return strings.Compare(a.Name, b.Name) })
			v.ServiceType = o.Spec.Type
		case *policyv1.PodDisruptionBudget:
			v.MaxUnavailable = o.Spec.MaxUnavailable.String()
		case *corev1.ConfigMap:
			v.Config = map[string]any{}
			_, eppConfig := o.Data[read]
			for name, content := range o.Data {
				if eppConfig && name != read {
					continue // a file the EPP does not read
				}
				var doc any
				if err := yaml.Unmarshal([]byte(content), &doc); err != nil {
					doc = "not YAML: " + err.Error()
				}
				if eppConfig {
					name = eppConfigFile
				}
				v.Config[name] = doc
			}
		case *networkingv1.NetworkPolicy:
			v.PolicySelector, v.PolicyTypes, v.Ingress = &o.Spec.PodSelector, o.Spec.PolicyTypes, o.Spec.Ingress
		}
		key := render.Key(o)
		if crb, ok := o.(*rbacv1.ClusterRoleBinding); ok {
			// Cluster-wide names: the chart's carry the namespace (two releases of one
			// name in two namespaces), kustomize's cannot (it is the overlay's).
			v.RoleRef, v.Subjects = &crb.RoleRef, crb.Subjects
			key = "ClusterRoleBinding//" + strings.Replace(crb.Name, "-team-a-", "-", 1)
		}
		out[key] = v
	}
	return out
}

// TestParityWithHelm renders the chart and builds the matching kustomize overlay, for
// peer discovery off and on, and compares kinds and names, RBAC, container args, env,
// ports, probes, security and replicas. A difference names the object and field.
// sidecarStandIn is what a user's overlay does in sidecar mode (the EPP container is
// theirs), here as the tests run it: epp reading the sidecar's file, as
// overlays/sidecar.
const sidecarStandIn = `images:
  - name: epp-peer-discovery/llm-d-router-epp
    newName: epp-peer-discovery/epp
patches:
  - target: {group: apps, version: v1, kind: Deployment}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/args
        value: [--metrics-bind-address=:9090, --health-probe-bind-address=:8081, --enable-peer-discovery, --epp-peer-file=$(EPP_PEERS_FILE)]
      - op: replace
        path: /spec/template/spec/containers/0/resources
        value: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 128Mi}}
`

// sidecarStandInValues are the chart's values for the same EPP container.
func sidecarStandInValues(epp map[string]any) {
	epp["image"] = map[string]any{"repository": "epp-peer-discovery/epp"}
	epp["args"] = []any{"--metrics-bind-address=:9090", "--health-probe-bind-address=:8081", "--enable-peer-discovery", "--epp-peer-file=$(EPP_PEERS_FILE)"}
	epp["resources"] = map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}, "limits": map[string]any{"memory": "128Mi"}}
}

// TestParityWithHelm renders the chart and builds the matching kustomize overlay, for
// peer discovery off and on, and compares kinds and names, RBAC, container args, env,
// ports, probes, security, replicas and the EPP configuration. A difference names the
// object and field.
func TestParityWithHelm(t *testing.T) {
	for _, tc := range []struct {
		name, release, prefix string
		peerDiscovery         map[string]any // chart values under router.epp.peerDiscovery
		components            []string
		stateSync             map[string]any // chart values under router.epp.stateSync
		metricsAuth           bool           // the chart's default; kustomize: the metrics-auth component
	}{
		{"off", "epp", "", nil, nil, nil, false},
		{"on", "epp", "", map[string]any{"enabled": true}, []string{"peer-discovery"}, nil, false},
		{"on, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true}, []string{"peer-discovery"}, nil, false},
		{"off, release router = namePrefix router-", "router", "router-", nil, nil, nil, false},
		{"on, membership alive", "epp", "", map[string]any{"enabled": true, "membership": "alive"}, []string{"peer-discovery", "peer-membership-alive"}, nil, false},
		{"dns", "epp", "", map[string]any{"enabled": true, "source": "dns"}, []string{"peer-discovery-dns"}, nil, false},
		{"dns, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true, "source": "dns"}, []string{"peer-discovery-dns"}, nil, false},
		{"sidecar", "epp", "", map[string]any{"enabled": true, "mode": "sidecar"}, []string{"peer-discovery-sidecar"}, nil, false},
		{"sidecar, membership alive", "epp", "", map[string]any{"enabled": true, "mode": "sidecar", "membership": "alive"},
			[]string{"peer-discovery-sidecar", "peer-membership-alive-sidecar"}, nil, false},
		{"sidecar, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true, "mode": "sidecar"}, []string{"peer-discovery-sidecar"}, nil, false},
		{"probing and network policy", "epp", "", map[string]any{"enabled": true, "probeInterval": "5s", "networkPolicy": map[string]any{"enabled": true}},
			[]string{"peer-discovery", "peer-probe", "peer-network-policy"}, nil, false},
		{"probing, membership alive", "epp", "", map[string]any{"enabled": true, "membership": "alive", "probeInterval": "5s"},
			[]string{"peer-discovery", "peer-membership-alive", "peer-probe"}, nil, false},
		{"sidecar, probing and network policy", "epp", "", map[string]any{"enabled": true, "mode": "sidecar", "probeInterval": "5s", "networkPolicy": map[string]any{"enabled": true}},
			[]string{"peer-discovery-sidecar", "peer-probe-sidecar", "peer-network-policy"}, nil, false},
		{"state sync", "epp", "", map[string]any{"enabled": true}, []string{"peer-discovery", "state-sync"}, map[string]any{"enabled": true}, false},
		{"state sync, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true}, []string{"peer-discovery", "state-sync"}, map[string]any{"enabled": true}, false},
		{"state sync with mTLS, probing and network policy", "epp", "", map[string]any{"enabled": true, "probeInterval": "5s", "networkPolicy": map[string]any{"enabled": true}},
			[]string{"peer-discovery", "peer-probe", "peer-network-policy", "state-sync", "state-sync-tls"},
			map[string]any{"enabled": true, "tls": map[string]any{"secretName": "epp-peer-sync-tls"}}, false},
		{"state sync with the shared prefix index", "epp", "", map[string]any{"enabled": true}, []string{"peer-discovery", "state-sync", "shared-prefix-index"},
			map[string]any{"enabled": true, "sharedPrefixIndex": map[string]any{"enabled": true}}, false},
		{"state sync with the shared prefix index and mTLS, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true},
			[]string{"peer-discovery", "state-sync", "shared-prefix-index", "state-sync-tls"},
			map[string]any{"enabled": true, "sharedPrefixIndex": map[string]any{"enabled": true}, "tls": map[string]any{"secretName": "epp-peer-sync-tls"}}, false},
		{"state sync with shared scraping", "epp", "", map[string]any{"enabled": true}, []string{"peer-discovery", "state-sync", "shared-scraping"},
			map[string]any{"enabled": true, "sharedScraping": map[string]any{"enabled": true}}, false},
		{"state sync with the shared prefix index and shared scraping", "epp", "", map[string]any{"enabled": true},
			[]string{"peer-discovery", "state-sync", "shared-prefix-index", "shared-scraping"},
			map[string]any{"enabled": true, "sharedPrefixIndex": map[string]any{"enabled": true}, "sharedScraping": map[string]any{"enabled": true}}, false},
		// In either order: both components write the file shared-scraping reads.
		{"state sync with shared scraping and the shared prefix index, mTLS, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true},
			[]string{"peer-discovery", "state-sync", "shared-scraping", "shared-prefix-index", "state-sync-tls"},
			map[string]any{"enabled": true, "sharedPrefixIndex": map[string]any{"enabled": true}, "sharedScraping": map[string]any{"enabled": true},
				"tls": map[string]any{"secretName": "epp-peer-sync-tls"}}, false},
		{"tracing", "epp", "", nil, []string{"tracing"}, nil, false},
		{"tracing, state sync, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true},
			[]string{"peer-discovery", "state-sync", "tracing"}, map[string]any{"enabled": true}, false},
		{"metrics auth", "epp", "", nil, []string{"metrics-auth"}, nil, true},
		{"metrics auth, peer discovery, release router = namePrefix router-", "router", "router-", map[string]any{"enabled": true},
			[]string{"peer-discovery", "metrics-auth"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The base serves plain metrics (a ClusterRoleBinding needs the overlay's
			// namespace); the chart checks tokens by default, as upstream.
			router := map[string]any{"monitoring": map[string]any{"prometheus": map[string]any{"auth": map[string]any{"enabled": tc.metricsAuth}}}}
			values := map[string]any{"router": router}
			if slices.Contains(tc.components, "tracing") {
				router["tracing"] = map[string]any{"enabled": true}
			}
			extra := ""
			if tc.peerDiscovery != nil {
				epp := map[string]any{"peerDiscovery": tc.peerDiscovery}
				if tc.stateSync != nil {
					epp["stateSync"] = tc.stateSync
				}
				if tc.peerDiscovery["mode"] == "sidecar" {
					sidecarStandInValues(epp)
					extra = sidecarStandIn
				}
				router["epp"] = epp
			}
			helm, err := render.HelmObjects(tc.release, "team-a", values)
			if err != nil {
				t.Fatal(err)
			}
			kust := userOverlayWith(t, "team-a", tc.prefix, extra, tc.components...)
			if diff := cmp.Diff(views(helm), views(kust)); diff != "" {
				t.Fatalf("Helm (-) and kustomize (+) differ:\n%s", diff)
			}
		})
	}
}
