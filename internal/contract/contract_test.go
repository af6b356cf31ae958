package contract_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// kubelet resolves env as the kubelet would for a pod named epp-0 in namespace
// llm, with IPs 10.0.0.7 and fd00::7.
func kubelet(env []corev1.EnvVar) func(string) string {
	fields := map[string]string{"metadata.name": "epp-0", "metadata.namespace": "llm", "status.podIP": "10.0.0.7", "status.podIPs": "10.0.0.7,fd00::7"}
	vars := map[string]string{}
	for _, e := range env {
		if e.ValueFrom != nil {
			vars[e.Name] = fields[e.ValueFrom.FieldRef.FieldPath]
		} else {
			vars[e.Name] = e.Value
		}
	}
	return func(k string) string { return vars[k] }
}

// TestTheEnvConfiguresWhatItSays: the contract's env, resolved as the kubelet does,
// read by the plugin's own configuration (its parameters unset): the service, port
// name, port, membership, debug address and the replica's identity are what the
// options say. A renamed setting or variable fails here, not in a cluster.
func TestTheEnvConfiguresWhatItSays(t *testing.T) {
	for _, o := range []contract.Options{
		{Service: "epp"},
		{Service: "router", PortName: "sync", Port: 9100, DebugPort: 9200, Membership: peers.MembershipAlive},
	} {
		r := contract.For(o)
		getenv := kubelet(append(slices.Clone(r.Identity), r.Env...))
		cfg, err := discovery.ConfigureParams(endpointslice.Spec(), nil, getenv, nil)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		want := map[string]string{"service": o.Service, "portName": "peer-sync", "port": "9005", "membership": "ready"}
		if o.PortName != "" {
			want["portName"], want["port"], want["membership"] = o.PortName, fmt.Sprint(o.Port), string(o.Membership)
		}
		for param, v := range want {
			if got := cfg.Value(param); got != v {
				t.Errorf("%+v: %s = %q, want %q", o, param, got, v)
			}
		}
		wantSelf := peers.Self{Namespace: "llm", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::7")}}
		if cfg.Self.Namespace != wantSelf.Namespace || cfg.Self.Name != wantSelf.Name || !slices.Equal(cfg.Self.Addresses, wantSelf.Addresses) {
			t.Errorf("%+v: the replica is %+v, want %+v", o, cfg.Self, wantSelf)
		}
		extras, _, err := discovery.ConfigureExtras(nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		wantDebug := ":9091"
		if o.DebugPort != 0 {
			wantDebug = fmt.Sprintf(":%d", o.DebugPort)
		}
		if extras.DebugAddress != wantDebug {
			t.Errorf("%+v: debugAddress = %q, want %q", o, extras.DebugAddress, wantDebug)
		}
		// The ports the plugin binds and looks up are the container's and the
		// Service's, the Service's targeting the container's by name.
		for i, p := range r.ContainerPorts {
			s := r.ServicePorts[i]
			if s.Name != p.Name || s.Port != p.ContainerPort || s.TargetPort.StrVal != p.Name {
				t.Errorf("%+v: Service port %+v does not expose container port %+v", o, s, p)
			}
		}
		if got := cfg.Value("portName"); r.ContainerPorts[0].Name != got {
			t.Errorf("%+v: the peer-sync port is named %q, the plugin looks up %q", o, r.ContainerPorts[0].Name, got)
		}
	}
}

// The env, ports and Role of a replica whose peer Service is epp, with the
// defaults otherwise.
func ExampleFor() {
	r := contract.For(contract.Options{Service: "epp"})
	for _, e := range append(r.Identity, r.Env...) {
		if e.ValueFrom != nil {
			fmt.Printf("%s from %s\n", e.Name, e.ValueFrom.FieldRef.FieldPath)
		} else {
			fmt.Printf("%s=%s\n", e.Name, e.Value)
		}
	}
	for _, p := range r.ContainerPorts {
		fmt.Printf("port %s %d\n", p.Name, p.ContainerPort)
	}
	for _, rule := range r.Rules {
		fmt.Printf("%s %s %v\n", rule.APIGroups[0], rule.Resources[0], rule.Verbs)
	}
	// Output:
	// POD_NAME from metadata.name
	// NAMESPACE from metadata.namespace
	// POD_IP from status.podIP
	// POD_IPS from status.podIPs
	// EPP_PEER_SERVICE=epp
	// EPP_PEER_DEBUG_ADDRESS=:9091
	// port peer-sync 9005
	// port http-peers 9091
	// discovery.k8s.io endpointslices [get list watch]
}
