package discovery_test

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
)

// extrasFromFlags registers the flags of spec and of the extras, parses args and
// reads the extras.
func extrasFromFlags(t *testing.T, args []string, getenv func(string) string) (discovery.Extras, error) {
	t.Helper()
	var got map[string]string
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := discovery.AddFlags(fs, getenv, []discovery.SourceSpec{toySpec(&got)})
	if err := fs.Parse(args); err != nil {
		return discovery.Extras{}, err
	}
	return f.Extras()
}

// TestExtrasAreDeclaredOnce: the probe interval and the peer-sync address mean
// the same as the binary's flags, as a plugin's parameters and as their variables
// (a value taken or refused alike, in the same words but for the name); the debug
// address is a parameter and a variable only, never read by the binary.
func TestExtrasAreDeclaredOnce(t *testing.T) {
	for _, tc := range []struct {
		flag, param, env string
		value            string // as a flag or a variable; JSON-quoted for the parameter
		want             discovery.Extras
		refused          string // the error's text after the name and value
	}{
		{flag: "epp-peer-probe-interval", param: "probeInterval", env: "EPP_PEER_PROBE_INTERVAL", value: "0", want: discovery.Extras{}},
		{flag: "epp-peer-probe-interval", param: "probeInterval", env: "EPP_PEER_PROBE_INTERVAL", value: "2s", want: discovery.Extras{ProbeInterval: 2 * time.Second}},
		{flag: "epp-peer-probe-interval", param: "probeInterval", env: "EPP_PEER_PROBE_INTERVAL", value: "50ms", refused: "want 0 (off) or at least 100ms"},
		{flag: "peer-sync-bind-address", param: "peerSyncAddress", env: "EPP_PEER_SYNC_ADDRESS", value: ":9005", want: discovery.Extras{PeerSyncAddress: ":9005"}},
		{flag: "peer-sync-bind-address", param: "peerSyncAddress", env: "EPP_PEER_SYNC_ADDRESS", value: "9005", refused: `want host:port, e.g. ":9005"`},
	} {
		fromFlag, flagErr := extrasFromFlags(t, []string{"--" + tc.flag + "=" + tc.value}, vars())
		fromFlagEnv, flagEnvErr := extrasFromFlags(t, nil, vars(tc.env, tc.value))
		fromParam, _, paramErr := discovery.ConfigureExtras(params(t, `{"`+tc.param+`": "`+tc.value+`"}`), vars())
		fromParamEnv, _, paramEnvErr := discovery.ConfigureExtras(nil, vars(tc.env, tc.value))
		if tc.refused == "" {
			for way, got := range map[string]discovery.Extras{"--" + tc.flag: fromFlag, tc.env + " (binary)": fromFlagEnv, tc.param: fromParam, tc.env + " (plugin)": fromParamEnv} {
				if got != tc.want {
					t.Errorf("%s=%s: read as %+v, want %+v", way, tc.value, got, tc.want)
				}
			}
			for _, err := range []error{flagErr, flagEnvErr, paramErr, paramEnvErr} {
				if err != nil {
					t.Errorf("%s=%s refused: %v", tc.param, tc.value, err)
				}
			}
			continue
		}
		shown := tc.value
		if tc.flag == "peer-sync-bind-address" {
			shown = `"` + tc.value + `"` // a string flag's value is shown quoted, a duration's as given
		}
		for err, want := range map[error]string{
			flagErr:     "invalid --" + tc.flag + "=" + shown + ": " + tc.refused,
			flagEnvErr:  "invalid " + tc.env + `="` + tc.value + `": ` + tc.refused,
			paramErr:    "invalid " + tc.param + `="` + tc.value + `": ` + tc.refused,
			paramEnvErr: "invalid " + tc.env + `="` + tc.value + `": ` + tc.refused,
		} {
			if err == nil || err.Error() != want {
				t.Errorf("%s=%s: error %v, want %q", tc.param, tc.value, err, want)
			}
		}
	}

	// The debug address: a parameter and its variable; the binary has no flag for it
	// and never reads the variable.
	if e, _, err := discovery.ConfigureExtras(nil, vars("EPP_PEER_DEBUG_ADDRESS", ":9091")); err != nil || e.DebugAddress != ":9091" {
		t.Errorf("EPP_PEER_DEBUG_ADDRESS=:9091 in a plugin: %+v, %v", e, err)
	}
	if e, err := extrasFromFlags(t, nil, vars("EPP_PEER_DEBUG_ADDRESS", ":9091")); err != nil || e.DebugAddress != "" {
		t.Errorf("EPP_PEER_DEBUG_ADDRESS=:9091 in the binary: %+v, %v; want it ignored", e, err)
	}
	if _, err := extrasFromFlags(t, []string{"--debug-address=:9091"}, vars()); err == nil || !strings.Contains(err.Error(), "not defined") {
		t.Errorf("a flag for the debug address: %v, want none defined", err)
	}
	// A flag wins over its variable; the source's parameters are left to it.
	if e, err := extrasFromFlags(t, []string{"--epp-peer-probe-interval=2s"}, vars("EPP_PEER_PROBE_INTERVAL", "not-a-duration")); err != nil || e.ProbeInterval != 2*time.Second {
		t.Errorf("flag 2s over a bad variable: %+v, %v", e, err)
	}
	_, rest, err := discovery.ConfigureExtras(params(t, `{"service": "epp", "debugAddress": ":9091"}`), vars())
	if err != nil || len(rest) != 1 || rest["service"] == nil {
		t.Errorf("the source's parameters left: %v, %v", rest, err)
	}
	if got := discovery.ExtrasParams(); !slices.Equal(got, []string{"debugAddress", "probeInterval", "peerSyncAddress"}) {
		t.Errorf("ExtrasParams: %v", got)
	}
}
