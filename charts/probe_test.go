package charts_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/render"
)

// probeEnv is the container's EPP_PEER_PROBE_INTERVAL.
func probeEnv(c corev1.Container) (string, bool) {
	for _, e := range c.Env {
		if e.Name == "EPP_PEER_PROBE_INTERVAL" {
			return e.Value, true
		}
	}
	return "", false
}

// envValue is the value of the container's variable name.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestProbing: probeInterval reaches the container that runs discovery as
// EPP_PEER_PROBE_INTERVAL, and the peer-sync answer is the plugin's only in mode epp
// (in sidecar mode the EPP container owns that port).
func TestProbing(t *testing.T) {
	t.Run("mode epp", func(t *testing.T) {
		pod := podOf(t, renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", "5s")))
		epp := render.EPPContainerOf(t, pod.Containers)
		if v, ok := probeEnv(epp); !ok || v != "5s" {
			t.Fatalf("epp env %v: want EPP_PEER_PROBE_INTERVAL=5s", epp.Env)
		}
		if v, ok := envValue(epp, "EPP_PEER_SYNC_ADDRESS"); !ok || v != ":9005" {
			t.Fatalf("epp env %v: the plugin must answer probes on its peer-sync port", epp.Env)
		}
	})
	t.Run("mode sidecar", func(t *testing.T) {
		pod := podOf(t, renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.mode", "sidecar",
			"router.epp.peerDiscovery.probeInterval", "2s", "router.epp.args", consumerArgs)))
		sc := pod.InitContainers[0]
		if v, ok := probeEnv(sc); !ok || v != "2s" {
			t.Fatalf("sidecar env %v: want EPP_PEER_PROBE_INTERVAL=2s", sc.Env)
		}
		epp := render.EPPContainerOf(t, pod.Containers)
		if _, ok := probeEnv(epp); ok {
			t.Fatal("the EPP container (the user's image) got the probe env")
		}
		for _, a := range append(slices.Clone(sc.Args), epp.Args...) {
			if a == "--peer-sync-bind-address=:9005" {
				t.Fatalf("sidecar mode binds peer-sync from our binary (%v): the EPP container owns that port", a)
			}
		}
	})
	t.Run("off by default and without discovery", func(t *testing.T) {
		for _, v := range []map[string]any{
			vals("router.epp.peerDiscovery.enabled", true),
			vals("router.epp.peerDiscovery.probeInterval", "5s"),
		} {
			epp := render.EPPContainerOf(t, podOf(t, renderChart(t, v)).Containers)
			if _, ok := probeEnv(epp); ok {
				t.Fatalf("values %v: probe env set", v)
			}
		}
	})
	t.Run("schema refuses an interval without a unit", func(t *testing.T) {
		if _, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.probeInterval", "5")); err == nil {
			t.Fatal(`probeInterval "5" accepted`)
		}
	})
	// One rule everywhere: the binary and the plugin refuse an interval below 100ms,
	// so the chart does too (it used to pass 50ms, and the pods then exited).
	// "0" is no interval either: the plugin exits on it (empty is off). The schema
	// refuses a one-part duration below 100ms (so helm lint and editors do); the
	// template refuses any sum below it, with the minimum in the message.
	t.Run("below 100ms refused, 100ms and compound durations accepted", func(t *testing.T) {
		for _, v := range []string{"50ms", "99ms", "0.05s", "99999us", "0", "0s", "0.001m", "00099ms"} {
			_, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", v))
			if err == nil || !strings.Contains(err.Error(), "probeInterval") {
				t.Errorf("probeInterval %q: %v, want refused naming the value", v, err)
			}
		}
		for _, v := range []string{"50ms40ms", "0s0ms", "0.0016m"} {
			_, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", v))
			if err == nil || !strings.Contains(err.Error(), "at least 100ms") || !strings.Contains(err.Error(), "probeInterval") {
				t.Errorf("probeInterval %q: %v, want refused naming the value and the 100ms minimum", v, err)
			}
		}
		for _, v := range []string{"100ms", "0.1s", "1m30s", "5s", "60ms40ms", "0.002m", "100000us"} {
			if _, _, err := render.Helm("epp", "team-a", vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.probeInterval", v)); err != nil {
				t.Errorf("probeInterval %q refused: %v", v, err)
			}
		}
	})
}

// admits says whether the policy lets a pod with the given labels reach protocol/port
// on the selected pods, by the NetworkPolicy rules (any rule admitting is enough; a
// rule without from admits every source; a port with endPort is a range).
func admits(np *networkingv1.NetworkPolicy, from map[string]string, proto corev1.Protocol, port int32) bool {
	for _, rule := range np.Spec.Ingress {
		sourceOK := len(rule.From) == 0
		for _, peer := range rule.From {
			if peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil {
				sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err == nil && sel.Matches(labels.Set(from)) {
					sourceOK = true
				}
			}
		}
		portOK := len(rule.Ports) == 0
		for _, p := range rule.Ports {
			pr := corev1.ProtocolTCP
			if p.Protocol != nil {
				pr = *p.Protocol
			}
			if pr != proto || p.Port == nil {
				continue
			}
			lo, hi := p.Port.IntVal, p.Port.IntVal
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if port >= lo && port <= hi {
				portOK = true
			}
		}
		if sourceOK && portOK {
			return true
		}
	}
	return false
}

// TestNetworkPolicy: off by default; when on, the peer-sync port is reachable only
// from the release's own pods and every other port stays as open as without a policy.
func TestNetworkPolicy(t *testing.T) {
	if n := count[*networkingv1.NetworkPolicy](renderChart(t, vals("router.epp.peerDiscovery.enabled", true))); n != 0 {
		t.Fatalf("%d NetworkPolicies by default", n)
	}
	if n := count[*networkingv1.NetworkPolicy](renderChart(t, vals("router.epp.peerDiscovery.networkPolicy.enabled", true))); n != 0 {
		t.Fatalf("%d NetworkPolicies without peer discovery", n)
	}
	for _, port := range []int{9005, 1, 65535} {
		r := renderChart(t, vals("router.epp.peerDiscovery.enabled", true, "router.epp.peerDiscovery.networkPolicy.enabled", true,
			"router.epp.peerDiscovery.port", port))
		np := only[*networkingv1.NetworkPolicy](t, r)
		podLabels := only[*appsv1.Deployment](t, r).Spec.Template.Labels
		if np.Name != "epp-peer-sync" || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Fatalf("policy %s types %v: want epp-peer-sync, Ingress only", np.Name, np.Spec.PolicyTypes)
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			t.Fatalf("policy selector %v does not select the release's pods %v", np.Spec.PodSelector, podLabels)
		}
		peer := podLabels
		stranger := map[string]string{"app.kubernetes.io/name": "something-else"}
		otherRelease := map[string]string{"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": "other"}
		p := int32(port)
		if !admits(np, peer, corev1.ProtocolTCP, p) {
			t.Errorf("port %d: a peer cannot reach peer-sync", port)
		}
		for _, who := range []map[string]string{stranger, otherRelease} {
			if admits(np, who, corev1.ProtocolTCP, p) {
				t.Errorf("port %d: %v reaches peer-sync", port, who)
			}
		}
		for _, other := range []int32{1, 8081, 9002, 9090, p - 1, p + 1, 65535} {
			if other < 1 || other > 65535 || other == p {
				continue
			}
			if !admits(np, stranger, corev1.ProtocolTCP, other) {
				t.Errorf("peer-sync %d: TCP %d closed to others; only peer-sync may be restricted", port, other)
			}
		}
		if !admits(np, stranger, corev1.ProtocolUDP, p) {
			t.Errorf("peer-sync %d: UDP closed to others", port)
		}
	}
}
