package podwatch_test

import (
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/podwatch"
)

func vars(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

var pod0 = []string{"POD_NAME", "epp-0", "POD_IP", "10.0.0.1", "NAMESPACE", "ns"}

// configure reads the spec as the plugin does (parameters, as JSON) or, with
// flags, as the epp binary does.
func configure(t *testing.T, flags []string, params string, env ...string) (*discovery.Configured, error) {
	t.Helper()
	getenv := vars(env...)
	if flags == nil {
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			t.Fatal(err)
		}
		return discovery.ConfigureParams(podwatch.Spec(), p, getenv, nil)
	}
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := discovery.AddFlags(fs, getenv, []discovery.SourceSpec{podwatch.Spec()})
	if err := fs.Parse(flags); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	return f.Configure(podwatch.Spec(), nil)
}

func TestSettings(t *testing.T) {
	c, err := configure(t, nil, `{"selector": "app.kubernetes.io/name=epp", "membership": "alive"}`, pod0...)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Summary(), " "); got != "namespace=ns selector=app.kubernetes.io/name=epp portName=peer-sync port=9005 membership=alive" {
		t.Fatalf("settings %q", got)
	}
	if c.Spec.PluginType() != "pod-peer-discovery" || len(c.Spec.Permissions) != 1 || c.Spec.Permissions[0].Resources[0] != "pods" {
		t.Fatalf("plugin type %s, permissions %+v", c.Spec.PluginType(), c.Spec.Permissions)
	}
	// The selector from its variable in a plugin; never in the binary, whose flag
	// selects the source.
	if c, err := configure(t, nil, `{}`, append(pod0, "EPP_PEER_POD_SELECTOR", "app=epp")...); err != nil || c.Value("selector") != "app=epp" {
		t.Fatalf("selector from EPP_PEER_POD_SELECTOR: %v", err)
	}
	if _, err := configure(t, []string{}, "", append(pod0, "EPP_PEER_POD_SELECTOR", "app=epp")...); err == nil || err.Error() != "--epp-peer-pod-selector is required: the label selector of the EPP's own pods" {
		t.Fatalf("the binary without the flag: %v", err)
	}
	for _, tc := range []struct {
		flags  []string
		params string
		env    []string
		want   string // with NAME for the flag or the parameter
	}{
		{[]string{"--epp-peer-pod-selector=app in (epp"}, `{"selector": "app in (epp"}`, pod0, `invalid NAME="app in (epp": `},
		{[]string{"--epp-peer-pod-selector="}, `{"selector": ""}`, pod0, `invalid NAME="": selects every pod of the namespace`},
		{[]string{"--epp-peer-pod-selector=app=epp"}, `{"selector": "app=epp"}`, []string{"POD_NAME", "epp-0"}, "NAME needs a namespace: set "},
		{[]string{"--epp-peer-pod-selector=app=epp"}, `{"selector": "app=epp"}`, []string{"NAMESPACE", "ns"}, "NAME: this replica must know itself"},
		{nil, `{}`, pod0, "NAME is required"},
	} {
		if tc.flags != nil {
			_, err := configure(t, tc.flags, "", tc.env...)
			if want := strings.ReplaceAll(tc.want, "NAME", "--epp-peer-pod-selector"); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("flags %v: %v, want %q", tc.flags, err, want)
			}
		}
		_, err := configure(t, nil, tc.params, tc.env...)
		if want := strings.ReplaceAll(tc.want, "NAME", "selector"); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("parameters %s: %v, want %q", tc.params, err, want)
		}
	}
}
