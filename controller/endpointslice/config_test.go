package endpointslice_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// TestSettingsConfig: a Go program's settings get the defaults and the checks of
// the plugin's parameters, named as parameters.
func TestSettingsConfig(t *testing.T) {
	self := peers.Self{Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	cfg, err := endpointslice.Settings{Service: "epp", Namespace: "team"}.Config(self)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "team" || cfg.PortName != "peer-sync" || cfg.DefaultPort != 9005 || cfg.Membership != peers.MembershipReady ||
		cfg.Self.Name != "epp-0" || cfg.Self.Namespace != "team" || len(cfg.Self.Addresses) != 1 {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = endpointslice.Settings{Service: "epp", Namespace: "ns", PortName: "state", Port: 7000, Membership: "alive"}.Config(self)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "ns" || cfg.PortName != "state" || cfg.DefaultPort != 7000 || cfg.Membership != peers.MembershipAlive || cfg.Self.Namespace != "ns" {
		t.Fatalf("explicit settings: %+v", cfg)
	}
	for _, tc := range []struct {
		s    endpointslice.Settings
		want string
	}{
		{endpointslice.Settings{Namespace: "ns"}, "service is required"},
		{endpointslice.Settings{Service: "epp"}, "service needs a namespace: set namespace"},
		{endpointslice.Settings{Service: "EPP.svc", Namespace: "ns"}, `invalid service="EPP.svc"`},
		{endpointslice.Settings{Service: "epp", Namespace: "ns", Port: 70000}, "invalid port=70000: must be between 1 and 65535"},
	} {
		if _, err := tc.s.Config(self); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.s, err, tc.want)
		}
	}
}

// TestParametersFromTheEnvironment: what the parameters leave out comes from the
// variables the source declares, and a bad value is named by its variable.
func TestParametersFromTheEnvironment(t *testing.T) {
	vars := map[string]string{"POD_NAMESPACE": "team", "POD_NAME": "epp-0", "POD_IP": "10.0.0.1", "EPP_PEER_SERVICE": "router-epp",
		"EPP_PEER_PORT": "7000", "EPP_PEER_MEMBERSHIP": "alive"}
	getenv := func(k string) string { return vars[k] }
	c, err := discovery.ConfigureParams(endpointslice.Spec(), map[string]json.RawMessage{"portName": json.RawMessage(`"state"`)}, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.Summary(), " ")
	if want := "namespace=team service=router-epp portName=state port=7000 membership=alive"; got != want {
		t.Fatalf("settings %q, want %q", got, want)
	}
	if c.Self.Name != "epp-0" || c.Self.Namespace != "team" {
		t.Fatalf("self %+v", c.Self)
	}
	vars["EPP_PEER_PORT"] = "http"
	if _, err := discovery.ConfigureParams(endpointslice.Spec(), nil, getenv, nil); err == nil || !strings.Contains(err.Error(), `invalid EPP_PEER_PORT="http": not a number`) {
		t.Fatalf("EPP_PEER_PORT=http: %v", err)
	}
	// A parameter wins over its variable.
	if _, err := discovery.ConfigureParams(endpointslice.Spec(), map[string]json.RawMessage{"port": json.RawMessage("7001")}, getenv, nil); err != nil {
		t.Fatalf("a parameter must win over its variable: %v", err)
	}
}
