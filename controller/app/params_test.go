package app_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
)

// TestPluginParametersAreValidatedLikeFlags checks that the plugin's JSON parameters
// and the binary's flags are refused with the same message, naming the setting in
// the user's own terms (the parameter, or the flag).
func TestPluginParametersAreValidatedLikeFlags(t *testing.T) {
	tests := []struct {
		name   string
		flags  []string
		params string
		env    func(string) string
	}{
		{"port out of range", []string{"--epp-peer-port=70000"}, `{"service": "epp", "port": 70000}`, podEnv},
		{"invalid port name", []string{"--epp-peer-port-name=Peer_Sync"}, `{"service": "epp", "portName": "Peer_Sync"}`, podEnv},
		{"invalid service", []string{"--epp-peer-service=EPP.svc"}, `{"service": "EPP.svc"}`, podEnv},
		{"invalid membership", []string{"--epp-peer-membership=leader"}, `{"service": "epp", "membership": "leader"}`, podEnv},
		{"invalid namespace", []string{"--pool-namespace=Team_A"}, `{"service": "epp", "namespace": "Team_A"}`, podEnv},
		{"no namespace", nil, `{"service": "epp"}`, env("POD_NAME", "epp-0")},
	}
	// Flag names, longest first so that --epp-peer-port-name is not cut short.
	names := endpointslice.FlagNames
	flagToParam := strings.NewReplacer(
		names.PortName, endpointslice.ParamNames.PortName,
		names.Service, endpointslice.ParamNames.Service,
		names.Namespace, endpointslice.ParamNames.Namespace,
		names.Port, endpointslice.ParamNames.Port,
		names.Membership, endpointslice.ParamNames.Membership)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--enable-peer-discovery", "--epp-peer-service=epp"}, tc.flags...)
			_, flagErr := app.Parse(args, tc.env, &bytes.Buffer{})
			if flagErr == nil {
				t.Fatalf("flags %v accepted", args)
			}
			_, paramErr := endpointslice.ConfigFromJSON(json.NewDecoder(strings.NewReader(tc.params)), tc.env)
			if paramErr == nil {
				t.Fatalf("parameters %s accepted", tc.params)
			}
			if want := flagToParam.Replace(flagErr.Error()); paramErr.Error() != want {
				t.Fatalf("parameters refused with\n  %q\nflags with\n  %q\nwant the same message with the parameter's name:\n  %q", paramErr, flagErr, want)
			}
		})
	}
}
