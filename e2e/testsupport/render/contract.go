package render

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// ShortOfContract lists how objs, a rendering of llm-d-router's EPP with the
// endpointslice peer discovery, fall short of contract.For(o), the one
// declaration of what a replica needs: the EPP container's env (each variable of
// the identity from its pod field, each of the plugin's settings with its value),
// its ports, the peer Service's ports, and a Role bound to the pods'
// ServiceAccount that grants the rules. Nil when the rendering meets it. What the
// rendering adds beyond the contract is not its concern.
func ShortOfContract(objs []client.Object, o contract.Options) []string {
	want := contract.For(o)
	d, err := EPPDeployment(objs)
	if err != nil {
		return []string{err.Error()}
	}
	var short []string
	c := EPPContainer(d)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	has := func(name string) string {
		e, ok := env[name]
		switch {
		case !ok:
			return "the EPP container has no such variable"
		case e.ValueFrom != nil:
			return fmt.Sprintf("the EPP container has it from %+v", *e.ValueFrom)
		}
		return fmt.Sprintf("the EPP container has %q", e.Value)
	}
	for _, w := range want.Identity {
		if e, ok := env[w.Name]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != w.ValueFrom.FieldRef.FieldPath {
			short = append(short, fmt.Sprintf("env %s: want it from the pod's %s, %s", w.Name, w.ValueFrom.FieldRef.FieldPath, has(w.Name)))
		}
	}
	for _, w := range want.Env {
		if e, ok := env[w.Name]; !ok || e.ValueFrom != nil || e.Value != w.Value {
			short = append(short, fmt.Sprintf("env %s: want %q, %s", w.Name, w.Value, has(w.Name)))
		}
	}
	for _, w := range want.ContainerPorts {
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == w.Name && p.ContainerPort == w.ContainerPort && (p.Protocol == w.Protocol || p.Protocol == "" && w.Protocol == corev1.ProtocolTCP)
		}) {
			short = append(short, fmt.Sprintf("container port %s %d/%s: the EPP container has %+v", w.Name, w.ContainerPort, w.Protocol, c.Ports))
		}
	}
	var svc *corev1.Service
	for _, obj := range objs {
		if s, ok := obj.(*corev1.Service); ok && s.Name == o.Service {
			svc = s
		}
	}
	if svc == nil {
		short = append(short, fmt.Sprintf("no Service %s (the peer Service)", o.Service))
	} else {
		for _, w := range want.ServicePorts {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Name == w.Name && p.Port == w.Port && p.TargetPort == w.TargetPort && (p.Protocol == w.Protocol || p.Protocol == "" && w.Protocol == corev1.ProtocolTCP)
			}) {
				short = append(short, fmt.Sprintf("Service %s port %s %d -> %s: it has %+v", svc.Name, w.Name, w.Port, w.TargetPort.String(), svc.Spec.Ports))
			}
		}
	}
	granted := rulesBoundTo(objs, d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	for _, w := range want.Rules {
		for _, group := range w.APIGroups {
			for _, res := range w.Resources {
				for _, verb := range w.Verbs {
					if !slices.ContainsFunc(granted, func(r rbacv1.PolicyRule) bool {
						return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, verb)
					}) {
						short = append(short, fmt.Sprintf("no Role bound to the pods' ServiceAccount grants %s %s.%s", verb, res, group))
					}
				}
			}
		}
	}
	return short
}

// rulesBoundTo are the rules of the Roles that a RoleBinding among objs binds to the
// ServiceAccount sa ("" is default) of namespace ns.
func rulesBoundTo(objs []client.Object, ns, sa string) []rbacv1.PolicyRule {
	if sa == "" {
		sa = "default"
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, obj := range objs {
		if r, ok := obj.(*rbacv1.Role); ok {
			roles[r.Name] = r.Rules
		}
	}
	var out []rbacv1.PolicyRule
	for _, obj := range objs {
		b, ok := obj.(*rbacv1.RoleBinding)
		if !ok || b.RoleRef.Kind != "Role" {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && (s.Namespace == "" || s.Namespace == ns || ns == "") {
				out = append(out, roles[b.RoleRef.Name]...)
			}
		}
	}
	return out
}
