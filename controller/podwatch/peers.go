package podwatch

import (
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Config says which pods to read and how to turn them into peers.
type Config struct {
	// Namespace of the pods.
	Namespace string
	// Selector is the label selector of the EPP's own pods.
	Selector string
	// PortName names the container port whose number is each peer's port; Port is
	// used for a pod without it.
	PortName string
	Port     int
	// Membership says which pods are peers ("" is peers.MembershipReady).
	Membership peers.Membership
	// Self is this replica: its family is preferred for pods with several IPs.
	Self peers.Self
}

// Peers returns the pods that are members, by cfg's membership, as peers ordered by
// ID, this replica included (the Publisher leaves it out). It depends on neither
// the order of pods nor that of their IPs.
func Peers(pods []*corev1.Pod, cfg Config) []peers.PeerMetadata {
	out := make([]peers.PeerMetadata, 0, len(pods))
	for _, pod := range pods {
		if p, ok := peerOf(pod, cfg); ok {
			out = append(out, p)
		}
	}
	peers.SortByID(out)
	return out
}

// peerOf is pod as a peer, if it is one.
func peerOf(pod *corev1.Pod, cfg Config) (peers.PeerMetadata, bool) {
	addr, ok := address(pod, cfg.Self.Family())
	if !ok {
		return peers.PeerMetadata{}, false
	}
	done := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	terminating := pod.DeletionTimestamp != nil || done
	ready := !done && isReady(pod)
	membership := cfg.Membership
	if membership == "" {
		membership = peers.MembershipReady
	}
	if !membership.Admits(ready, terminating) {
		return peers.PeerMetadata{}, false
	}
	return peers.PeerMetadata{Namespace: pod.Namespace, Name: pod.Name, Address: addr.String(), Port: port(pod, cfg),
		Ready: ready, Serving: ready, Terminating: terminating}, true
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// address is the pod's IP of family (4 or 6; 0: 4), else its lowest one; false
// for a pod without an IP yet.
func address(pod *corev1.Pod, family int) (netip.Addr, bool) {
	var addrs []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	add(pod.Status.PodIP)
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, false
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	if family == 0 {
		family = 4
	}
	for _, a := range addrs {
		if peers.FamilyOf(a) == family {
			return a, true
		}
	}
	return addrs[0], true
}

// port is the number of the container port named cfg.PortName (a container's, or
// a sidecar init container's), else cfg.Port.
func port(pod *corev1.Pod, cfg Config) int32 {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.Name == cfg.PortName && p.ContainerPort > 0 {
					return p.ContainerPort
				}
			}
		}
	}
	return int32(cfg.Port)
}
