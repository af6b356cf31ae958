package endpointslice_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

func TestConfigFromJSONDefaults(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"POD_NAMESPACE": "team", "POD_NAME": "epp-0", "POD_IP": "10.0.0.1"}[k]
	}
	cfg, err := endpointslice.ConfigFromJSON(json.NewDecoder(strings.NewReader(`{"service": "epp"}`)), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "team" || cfg.PortName != "peer-sync" || cfg.DefaultPort != 9005 || cfg.Membership != peers.MembershipReady ||
		cfg.Self.Name != "epp-0" || cfg.Self.Namespace != "team" || len(cfg.Self.Addresses) != 1 {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = endpointslice.ConfigFromJSON(json.NewDecoder(strings.NewReader(
		`{"service": "epp", "namespace": "ns", "portName": "state", "port": 7000, "membership": "alive"}`)), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "ns" || cfg.PortName != "state" || cfg.DefaultPort != 7000 || cfg.Membership != peers.MembershipAlive || cfg.Self.Namespace != "ns" {
		t.Fatalf("explicit parameters: %+v", cfg)
	}
}

func TestAddToCacheOptions(t *testing.T) {
	cfg, err := endpointslice.Settings{Service: "epp", Namespace: "ns"}.Config(endpointslice.ParamNames, peers.Self{Name: "epp-0"})
	if err != nil {
		t.Fatal(err)
	}
	// The host's own entries and defaults stay; one entry is added, scoped.
	host := cache.Options{
		DefaultNamespaces: map[string]cache.Config{"ns": {}},
		ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{"app": "vllm"})}},
	}
	if err := endpointslice.New(cfg, testLogger(t), endpointslice.Options{}).AddToCacheOptions(&host); err != nil {
		t.Fatal(err)
	}
	if len(host.ByObject) != 2 || len(host.DefaultNamespaces) != 1 || host.ReaderFailOnMissingInformer {
		t.Fatalf("host options after the merge: %+v", host)
	}
	for obj, entry := range host.ByObject {
		if _, ok := obj.(*discoveryv1.EndpointSlice); !ok {
			continue
		}
		if _, ok := entry.Namespaces["ns"]; !ok || len(entry.Namespaces) != 1 || entry.Label.String() != "kubernetes.io/service-name=epp" || entry.Transform == nil {
			t.Fatalf("slice entry %+v: want namespace ns, the service-name label and the managed-fields transform", entry)
		}
	}
	// A second merge, or a host that already caches slices, is refused.
	if err := endpointslice.New(cfg, testLogger(t), endpointslice.Options{}).AddToCacheOptions(&host); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("merging into options that already cache EndpointSlices: %v", err)
	}
	// A host scheme without discovery/v1 is refused with the fix.
	bare := cache.Options{Scheme: runtime.NewScheme()}
	if err := endpointslice.New(cfg, testLogger(t), endpointslice.Options{}).AddToCacheOptions(&bare); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Fatalf("merging into a scheme without EndpointSlice: %v", err)
	}
}
