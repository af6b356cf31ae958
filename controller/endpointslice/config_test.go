package endpointslice_test

import (
	"encoding/json"
	"strings"
	"testing"

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
