package app_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/settingnames"
)

// TestPluginParametersAreValidatedLikeFlags checks that a source's plugin
// parameters (read as llm-d-router's EPP plugins read them) and the binary's flags
// are refused with the same message, naming the setting in the user's own terms
// (the parameter, or the flag), for every source.
func TestPluginParametersAreValidatedLikeFlags(t *testing.T) {
	dnsName := "_peer-sync._tcp.epp.ns.svc"
	tests := []struct {
		name   string
		flags  []string
		params string
		env    func(string) string
	}{
		{"port out of range", []string{"--epp-peer-service=epp", "--epp-peer-port=70000"}, `{"service": "epp", "port": 70000}`, podEnv},
		{"invalid port name", []string{"--epp-peer-service=epp", "--epp-peer-port-name=Peer_Sync"}, `{"service": "epp", "portName": "Peer_Sync"}`, podEnv},
		{"invalid service", []string{"--epp-peer-service=EPP.svc"}, `{"service": "EPP.svc"}`, podEnv},
		{"invalid membership", []string{"--epp-peer-service=epp", "--epp-peer-membership=leader"}, `{"service": "epp", "membership": "leader"}`, podEnv},
		{"invalid namespace", []string{"--epp-peer-service=epp", "--pool-namespace=Team_A"}, `{"service": "epp", "namespace": "Team_A"}`, podEnv},
		{"no namespace", []string{"--epp-peer-service=epp"}, `{"service": "epp"}`, env("POD_NAME", "epp-0")},
		{"service without self", []string{"--epp-peer-service=epp"}, `{"service": "epp"}`, env("NAMESPACE", "ns")},
		{"DNS name", []string{"--epp-peer-dns=epp.ns.svc"}, `{"name": "epp.ns.svc"}`, podEnv},
		{"DNS server", []string{"--epp-peer-dns=" + dnsName, "--epp-peer-dns-server=coredns"}, `{"name": "` + dnsName + `", "server": "coredns"}`, podEnv},
		{"DNS without an address", []string{"--epp-peer-dns=" + dnsName}, `{"name": "` + dnsName + `"}`, env("POD_NAME", "epp-0", "NAMESPACE", "ns")},
		{"file port", []string{"--epp-peer-file=/p", "--epp-peer-port=0"}, `{"path": "/p", "port": 0}`, podEnv},
	}
	rewrite := settingnames.FlagToParam(app.DefaultSources())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--enable-peer-discovery"}, tc.flags...)
			_, flagErr := app.Parse(args, tc.env, &bytes.Buffer{})
			if flagErr == nil {
				t.Fatalf("flags %v accepted", args)
			}
			spec := specOfFlag(t, tc.flags[0])
			var params map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.params), &params); err != nil {
				t.Fatal(err)
			}
			hostname := func() (string, error) { return tc.env("HOSTNAME"), nil } // as the binary reads it
			_, paramErr := discovery.ConfigureParams(spec, params, tc.env, hostname)
			if paramErr == nil {
				t.Fatalf("parameters %s accepted", tc.params)
			}
			if want := rewrite.Replace(flagErr.Error()); paramErr.Error() != want {
				t.Fatalf("parameters refused with\n  %q\nflags with\n  %q\nwant the same message with the parameter's name:\n  %q", paramErr, flagErr, want)
			}
		})
	}
}

// specOfFlag is the source that flag (--x=v) selects.
func specOfFlag(t *testing.T, flag string) discovery.SourceSpec {
	t.Helper()
	name, _, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
	for _, s := range app.DefaultSources() {
		if s.Select.Flag == name {
			return s
		}
	}
	t.Fatalf("no source is selected by %s", flag)
	return discovery.SourceSpec{}
}
