package podwatch_test

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/podwatch"
)

type podOption func(*corev1.Pod)

// pod is a pod of the EPP in namespace ns with ips, ready unless an option says.
func pod(name string, ips []string, opts ...podOption) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func deleting(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
func phase(ph corev1.PodPhase) podOption {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}
func containerPort(name string, n int32) podOption {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: name, ContainerPort: n})
	}
}
func sidecarPort(name string, n int32) podOption {
	return func(p *corev1.Pod) {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "sidecar", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: name, ContainerPort: n}}})
	}
}

func list(ps []peers.PeerMetadata) string {
	var out []string
	for _, p := range ps {
		s := p.ID() + "@" + p.HostPort()
		if !p.Ready {
			s += "(not ready)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func TestPeers(t *testing.T) {
	v4 := peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	v6 := peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("fd00::1")}}
	cfg := podwatch.Config{Namespace: "ns", Selector: "app=epp", PortName: "peer-sync", Port: 9005, Self: v4}
	alive := cfg
	alive.Membership = peers.MembershipAlive
	tests := []struct {
		name string
		cfg  podwatch.Config
		pods []*corev1.Pod
		want string
	}{
		{"ready pods, self included (the Publisher leaves it out)", cfg,
			[]*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}), pod("epp-0", []string{"10.0.0.1"})},
			"ns/epp-0@10.0.0.1:9005,ns/epp-1@10.0.0.2:9005"},
		{"not ready: out, unless alive", cfg, []*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}, notReady)}, ""},
		{"not ready with alive: a peer, not ready", alive, []*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}, notReady)}, "ns/epp-1@10.0.0.2:9005(not ready)"},
		{"terminating: out, even alive", alive, []*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}, deleting)}, ""},
		{"finished pods: out, even alive", alive,
			[]*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}, phase(corev1.PodSucceeded)), pod("epp-2", []string{"10.0.0.3"}, phase(corev1.PodFailed))}, ""},
		{"no IP yet: out", alive, []*corev1.Pod{pod("epp-1", nil)}, ""},
		{"the named container port, else the port", cfg,
			[]*corev1.Pod{pod("epp-1", []string{"10.0.0.2"}, containerPort("http", 8080), containerPort("peer-sync", 7000)),
				pod("epp-2", []string{"10.0.0.3"}, containerPort("http", 8080)),
				pod("epp-3", []string{"10.0.0.4"}, sidecarPort("peer-sync", 7001))},
			"ns/epp-1@10.0.0.2:7000,ns/epp-2@10.0.0.3:9005,ns/epp-3@10.0.0.4:7001"},
		{"dual stack: this replica's family", podwatch.Config{PortName: "peer-sync", Port: 9005, Self: v6},
			[]*corev1.Pod{pod("epp-1", []string{"10.0.0.2", "fd00::2"}), pod("epp-2", []string{"10.0.0.3"})},
			"ns/epp-1@[fd00::2]:9005,ns/epp-2@10.0.0.3:9005"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(podwatch.Peers(tc.pods, tc.cfg)); got != tc.want {
				t.Fatalf("peers %q, want %q", got, tc.want)
			}
			// The order of the pods never matters.
			for range 10 {
				shuffled := append([]*corev1.Pod(nil), tc.pods...)
				rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if got := list(podwatch.Peers(shuffled, tc.cfg)); got != tc.want {
					t.Fatalf("peers of the pods in another order %q, want %q", got, tc.want)
				}
			}
		})
	}
}
