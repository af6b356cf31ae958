package discovery_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// toy is a source declared once: a selecting setting with a variable, a shared
// port, a duration of its own and a parameter the binary lacks.
var (
	toyTarget = discovery.Setting{Param: "target", Flag: "toy-target", Env: []string{"TOY_TARGET"}, Usage: "What to read."}
	toyEvery  = discovery.Setting{Param: "every", Flag: "toy-every", Env: []string{"TOY_EVERY"}, Usage: "How often."}
	toyExtra  = discovery.Setting{Param: "extra", Env: []string{"TOY_EXTRA"}, Usage: "A parameter only."}
)

// toySpec records what its settings were read as in got.
func toySpec(got *map[string]string) discovery.SourceSpec {
	return discovery.SourceSpec{
		Name: "toy", Select: toyTarget, Placeholder: "<target>",
		Settings: func(b *discovery.Binder) discovery.Bound {
			var target, extra string
			var port int
			every := 5 * time.Second
			b.String(&target, toyTarget, func(s string) error {
				if strings.Contains(s, " ") {
					return errors.New("no spaces")
				}
				return nil
			})
			discovery.BindPort(b, &port)
			b.Duration(&every, toyEvery, func(d time.Duration) error {
				if d < time.Second {
					return errors.New("want at least 1s")
				}
				return nil
			})
			b.String(&extra, toyExtra, nil)
			return discovery.Bound{
				Complete: func(*peers.Self) error {
					if target == "" {
						return errors.New(b.Name(toyTarget) + " is required")
					}
					*got = map[string]string{"target": target, "port": b.Name(discovery.PortSetting), "every": every.String(), "extra": extra}
					return nil
				},
				New: func(discovery.Deps) (discovery.Source, error) { return nil, nil },
			}
		},
	}
}

func vars(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func params(t *testing.T, s string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// parseFlags registers the sources' flags, parses args and configures spec.
func parseFlags(t *testing.T, spec discovery.SourceSpec, args []string, getenv func(string) string) error {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := discovery.AddFlags(fs, getenv, []discovery.SourceSpec{spec})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		return err
	}
	_, err := f.Configure(spec, nil)
	return err
}

// TestOneDeclarationTwoSurfaces: the same bad value is refused in the same words
// as a flag, a parameter and a variable, each named as the user set it.
func TestOneDeclarationTwoSurfaces(t *testing.T) {
	var got map[string]string
	spec := toySpec(&got)
	for _, tc := range []struct {
		flags  []string
		params string
		env    []string
		want   string
	}{
		{[]string{"--toy-target=a b"}, `{"target": "a b"}`, nil, `invalid %s="a b": no spaces`},
		{[]string{"--toy-target=a", "--epp-peer-port=0"}, `{"target": "a", "port": 0}`, nil, "invalid %s=0: must be between 1 and 65535"},
		{[]string{"--toy-target=a", "--toy-every=500ms"}, `{"target": "a", "every": "500ms"}`, nil, "invalid %s=%s: want at least 1s"},
	} {
		flagErr := parseFlags(t, spec, tc.flags, vars(tc.env...))
		_, paramErr := discovery.ConfigureParams(spec, params(t, tc.params), vars(tc.env...), nil)
		flagName, value, _ := strings.Cut(strings.TrimPrefix(tc.flags[len(tc.flags)-1], "--"), "=")
		var param string
		for _, x := range discovery.Declared(spec) {
			if x.Flag == flagName {
				param = x.Param
			}
		}
		wantFlag, wantParam := strings.Replace(tc.want, "%s", "--"+flagName, 1), strings.Replace(tc.want, "%s", param, 1)
		if strings.Count(tc.want, "%s") == 2 { // a duration: as a flag prints it, and as a JSON string
			wantFlag, wantParam = strings.Replace(wantFlag, "%s", value, 1), strings.Replace(wantParam, "%s", `"`+value+`"`, 1)
		}
		if flagErr == nil || flagErr.Error() != wantFlag {
			t.Errorf("flags %v: %v, want %q", tc.flags, flagErr, wantFlag)
		}
		if paramErr == nil || paramErr.Error() != wantParam {
			t.Errorf("parameters %s: %v, want %q", tc.params, paramErr, wantParam)
		}
	}
}

// TestVariables: a setting left unset comes from its variable, named by it when
// bad; a flag or parameter wins; the binary never reads the variable of the flag
// that selects a source, nor of a setting it has no flag for.
func TestVariables(t *testing.T) {
	var got map[string]string
	spec := toySpec(&got)
	env := vars("TOY_TARGET", "from-env", "EPP_PEER_PORT", "7000", "TOY_EXTRA", "x", "TOY_EVERY", "2s")
	if _, err := discovery.ConfigureParams(spec, nil, env, nil); err != nil {
		t.Fatal(err)
	}
	if got["target"] != "from-env" || got["port"] != "EPP_PEER_PORT" || got["every"] != "2s" || got["extra"] != "x" {
		t.Fatalf("parameters from the variables: %v", got)
	}
	if _, err := discovery.ConfigureParams(spec, params(t, `{"target": "p", "port": 7001}`), env, nil); err != nil || got["target"] != "p" || got["port"] != "port" {
		t.Fatalf("a parameter must win over its variable: %v %v", got, err)
	}
	err := parseFlags(t, spec, nil, env)
	if err == nil || err.Error() != "--toy-target is required" {
		t.Fatalf("the binary read the selecting flag's variable: %v", err)
	}
	if err := parseFlags(t, spec, []string{"--toy-target=f"}, env); err != nil || got["port"] != "EPP_PEER_PORT" || got["every"] != "2s" || got["extra"] != "" {
		t.Fatalf("flags with variables: %v %v", got, err)
	}
	_, err = discovery.ConfigureParams(spec, params(t, `{"target": "p"}`), vars("EPP_PEER_PORT", "http"), nil)
	if err == nil || err.Error() != `invalid EPP_PEER_PORT="http": not a number` {
		t.Fatalf("a bad variable: %v", err)
	}
	_, err = discovery.ConfigureParams(spec, params(t, `{"target": "p"}`), vars("TOY_EVERY", "0.5s"), nil)
	if err == nil || err.Error() != `invalid TOY_EVERY="0.5s": want at least 1s` {
		t.Fatalf("a bad duration variable: %v", err)
	}
}

// TestParameterTypes: a parameter of the wrong JSON type, and one the source does
// not have, are refused naming it.
func TestParameterTypes(t *testing.T) {
	var got map[string]string
	spec := toySpec(&got)
	for in, want := range map[string]string{
		`{"target": 5}`:                 `invalid target=5: want a string`,
		`{"target": "a", "port": "80"}`: `invalid port="80": want a whole number`,
		`{"target": "a", "every": 5}`:   `invalid every=5: want a duration such as "5s"`,
		`{"target": "a", "tagret": 1}`:  `unknown field "tagret": the parameters are namespace, target, port, every, extra`,
	} {
		if _, err := discovery.ConfigureParams(spec, params(t, in), nil, nil); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	if _, err := discovery.ConfigureParams(spec, params(t, `{"target": "a", "port": null}`), nil, nil); err != nil {
		t.Errorf("null is unset: %v", err)
	}
}

// TestFlagsOfSeveralSources: a flag two sources share is registered once; a flag
// of another source than the one selected is reported as unused; two sources that
// declare one flag differently are a programming error.
func TestFlagsOfSeveralSources(t *testing.T) {
	var got map[string]string
	toy := toySpec(&got)
	other := discovery.SourceSpec{Name: "other", Select: discovery.Setting{Param: "o", Flag: "other"},
		Settings: func(b *discovery.Binder) discovery.Bound {
			var o string
			var port int
			b.String(&o, discovery.Setting{Param: "o", Flag: "other"}, nil)
			discovery.BindPort(b, &port)
			return discovery.Bound{New: func(discovery.Deps) (discovery.Source, error) { return nil, nil }}
		}}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := discovery.AddFlags(fs, nil, []discovery.SourceSpec{toy, other})
	if err := fs.Parse([]string{"--other=x", "--epp-peer-port=7000", "--toy-every=2s"}); err != nil {
		t.Fatal(err)
	}
	specs, values := f.Selected()
	if len(specs) != 1 || specs[0].Name != "other" || values[0] != "x" {
		t.Fatalf("selected %v %v", specs, values)
	}
	if unused := strings.Join(f.Unused(other), ","); unused != "--toy-every" {
		t.Fatalf("unused with --other: %q", unused)
	}
	if !strings.HasPrefix(fs.Lookup("toy-every").Usage, "With --toy-target: how often.") {
		t.Errorf("a flag of one source says which: %q", fs.Lookup("toy-every").Usage)
	}
	if u := fs.Lookup("epp-peer-port").Usage; strings.HasPrefix(u, "With") || !strings.Contains(u, "Default from env EPP_PEER_PORT.") {
		t.Errorf("a shared flag's usage: %q", u)
	}
	clash := discovery.SourceSpec{Name: "clash", Select: discovery.Setting{Param: "c", Flag: "clash"},
		Settings: func(b *discovery.Binder) discovery.Bound {
			var c string
			var port int
			b.String(&c, discovery.Setting{Param: "c", Flag: "clash"}, nil)
			b.Int(&port, discovery.Setting{Param: "port", Flag: "epp-peer-port", Usage: "another meaning"}, nil)
			return discovery.Bound{}
		}}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "--epp-peer-port differently") {
			t.Fatalf("a clash of declarations: %v", r)
		}
	}()
	discovery.AddFlags(flag.NewFlagSet("clash", flag.ContinueOnError), nil, []discovery.SourceSpec{toy, clash})
}
