// Package contract declares, once, what a replica of llm-d-router's EPP with the
// endpointslice-peer-discovery plugin needs from the Deployment that runs it: the
// downward-API identity, the plugin's settings as env, the peer-sync and http-peers
// ports of the container and of the peer Service, and the permissions of the pods'
// ServiceAccount. The names come from the declarations they configure (the
// sources' Settings and Permissions, peers.SelfFromEnv's variables), so that a
// renamed setting renames them here.
//
// The post-renderer (epp post-render) builds what it adds from it; the chart's and
// the kustomize components' tests check what they render against it.
package contract

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// The port that serves /debug/peers (the plugin's debugAddress): its name, which
// epp check-peers and the helm test hooks look up on the Service, and its default.
const (
	DebugPortName    = "http-peers"
	DefaultDebugPort = 9091
)

// Options are the deployment's choices; a zero field takes its default.
type Options struct {
	// Service is the peer Service, whose EndpointSlices list the replicas.
	Service string
	// PortName and Port are the peer-sync port (discovery.DefaultPortName,
	// discovery.DefaultPort).
	PortName string
	Port     int32
	// DebugPort serves /debug/peers (DefaultDebugPort).
	DebugPort int32
	// Membership says which endpoints are peers (peers.MembershipReady, the
	// default, or peers.MembershipAlive).
	Membership peers.Membership
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.PortName == "" {
		o.PortName = discovery.DefaultPortName
	}
	if o.Port == 0 {
		o.Port = discovery.DefaultPort
	}
	if o.DebugPort == 0 {
		o.DebugPort = DefaultDebugPort
	}
	if o.Membership == "" {
		o.Membership = peers.MembershipReady
	}
	return o
}

// Replica is what the EPP container, its pod's Service and its ServiceAccount need.
type Replica struct {
	// Identity is the downward-API env the plugin reads the replica's name,
	// namespace and addresses from. A chart that sets one of these already (as
	// upstream's does POD_NAME and NAMESPACE) keeps its own.
	Identity []corev1.EnvVar
	// Env is the plugin's settings: the peer Service and the debug address always,
	// the port name, port and membership where they are not the default.
	Env []corev1.EnvVar
	// ContainerPorts are the EPP container's peer-sync and http-peers ports.
	ContainerPorts []corev1.ContainerPort
	// ServicePorts are the peer Service's, targeting those by name.
	ServicePorts []corev1.ServicePort
	// Rules are the ServiceAccount's namespaced Role: what the source reads
	// (endpointslice.Spec's Permissions).
	Rules []rbacv1.PolicyRule
}

// For is the contract of a replica deployed with o.
func For(o Options) Replica {
	o = o.withDefaults()
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	value := func(s discovery.Setting, v string) corev1.EnvVar { return corev1.EnvVar{Name: s.Env[0], Value: v} }
	r := Replica{
		Identity: []corev1.EnvVar{
			field(peers.PodNameEnv, "metadata.name"), field(discovery.NamespaceSetting.Env[0], "metadata.namespace"),
			field(peers.PodIPEnv, "status.podIP"), field(peers.PodIPsEnv, "status.podIPs"),
		},
		Env: []corev1.EnvVar{
			value(endpointslice.ServiceSetting, o.Service),
			value(discovery.DebugAddressSetting, ":"+strconv.Itoa(int(o.DebugPort))),
		},
		ContainerPorts: []corev1.ContainerPort{
			{Name: o.PortName, ContainerPort: o.Port, Protocol: corev1.ProtocolTCP},
			{Name: DebugPortName, ContainerPort: o.DebugPort, Protocol: corev1.ProtocolTCP},
		},
		ServicePorts: []corev1.ServicePort{
			{Name: o.PortName, Port: o.Port, TargetPort: intstr.FromString(o.PortName), Protocol: corev1.ProtocolTCP},
			{Name: DebugPortName, Port: o.DebugPort, TargetPort: intstr.FromString(DebugPortName), Protocol: corev1.ProtocolTCP},
		},
		Rules: endpointslice.Spec().Permissions,
	}
	if o.PortName != discovery.DefaultPortName {
		r.Env = append(r.Env, value(discovery.PortNameSetting, o.PortName))
	}
	if o.Port != discovery.DefaultPort {
		r.Env = append(r.Env, value(discovery.PortSetting, strconv.Itoa(int(o.Port))))
	}
	if o.Membership != peers.MembershipReady {
		r.Env = append(r.Env, value(discovery.MembershipSetting, string(o.Membership)))
	}
	return r
}
