// Package slicegen builds EndpointSlice fixtures for tests with functional options,
// so that each test states only what matters to it.
package slicegen

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// SliceOption changes a slice under construction.
type SliceOption func(*discoveryv1.EndpointSlice)

// EndpointOption changes an endpoint under construction.
type EndpointOption func(*discoveryv1.Endpoint)

// Slice returns an IPv4 slice named name in namespace "ns" of Service "epp", with a
// "peer-sync" port 9005, and the given options applied in order.
func Slice(name string, opts ...SliceOption) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "ns",
			Labels:    map[string]string{discoveryv1.LabelServiceName: "epp"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("peer-sync"), Port: ptr.To[int32](9005), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// Namespace sets the slice's namespace.
func Namespace(ns string) SliceOption {
	return func(s *discoveryv1.EndpointSlice) { s.Namespace = ns }
}

// Service sets the kubernetes.io/service-name label.
func Service(name string) SliceOption {
	return func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = name }
}

// NoServiceLabel removes the kubernetes.io/service-name label.
func NoServiceLabel() SliceOption {
	return func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelServiceName) }
}

// AddressType sets the slice's address type.
func AddressType(t discoveryv1.AddressType) SliceOption {
	return func(s *discoveryv1.EndpointSlice) { s.AddressType = t }
}

// IPv6 makes it an IPv6 slice.
func IPv6() SliceOption { return AddressType(discoveryv1.AddressTypeIPv6) }

// Ports replaces the slice's ports with one port per name/number pair.
func Ports(nameNumber ...any) SliceOption {
	return func(s *discoveryv1.EndpointSlice) {
		s.Ports = nil
		for i := 0; i+1 < len(nameNumber); i += 2 {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{
				Name:     ptr.To(nameNumber[i].(string)),
				Port:     ptr.To(int32(nameNumber[i+1].(int))),
				Protocol: ptr.To(corev1.ProtocolTCP),
			})
		}
	}
}

// NilPorts sets ports: null.
func NilPorts() SliceOption {
	return func(s *discoveryv1.EndpointSlice) { s.Ports = nil }
}

// Endpoint appends an endpoint with these addresses (at least one unless empty is
// meant), a targetRef to Pod pod (none when pod is ""), ready, and the options.
func Endpoint(pod string, addresses []string, opts ...EndpointOption) SliceOption {
	return func(s *discoveryv1.EndpointSlice) {
		ep := discoveryv1.Endpoint{
			Addresses:  addresses,
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}
		if pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.Namespace, Name: pod}
		}
		for _, o := range opts {
			o(&ep)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
}

// Pod is Endpoint for a Pod with one address.
func Pod(pod, address string, opts ...EndpointOption) SliceOption {
	return Endpoint(pod, []string{address}, opts...)
}

// NilEndpoints sets endpoints: null.
func NilEndpoints() SliceOption {
	return func(s *discoveryv1.EndpointSlice) { s.Endpoints = nil }
}

// ConditionsOf returns endpoint conditions with all three set.
func ConditionsOf(ready, serving, terminating bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}
}

// NotReady sets ready=false, serving=false.
func NotReady() EndpointOption {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions.Ready = ptr.To(false)
		e.Conditions.Serving = ptr.To(false)
	}
}

// ReadyUnknown sets ready to nil.
func ReadyUnknown() EndpointOption {
	return func(e *discoveryv1.Endpoint) { e.Conditions.Ready = nil }
}

// Terminating sets terminating=true and leaves ready as it is.
func Terminating() EndpointOption {
	return func(e *discoveryv1.Endpoint) { e.Conditions.Terminating = ptr.To(true) }
}

// TerminatingServing is a Pod shutting down that still serves: ready=false,
// serving=true, terminating=true.
func TerminatingServing() EndpointOption {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions.Ready = ptr.To(false)
		e.Conditions.Serving = ptr.To(true)
		e.Conditions.Terminating = ptr.To(true)
	}
}

// RefNamespace sets the targetRef's namespace (empty means "the slice's").
func RefNamespace(ns string) EndpointOption {
	return func(e *discoveryv1.Endpoint) { e.TargetRef.Namespace = ns }
}
