package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Setting declares one setting of a peer source, once, for both ways of setting it:
// the epp binary's flag and the EPP plugin's parameter, with the environment
// variables that supply it when neither sets it. A Binder reads it, checks it, and
// names it in errors the way the user set it: --epp-peer-port, port, EPP_PEER_PORT.
type Setting struct {
	// Param is the plugin parameter, a JSON field ("port").
	Param string
	// Flag is the epp binary's flag without its dashes ("epp-peer-port"); "" for a
	// setting the binary does not have.
	Flag string
	// Env are the variables that supply the setting, the first one set wins, when
	// neither the flag nor the parameter sets it. The binary never reads them for
	// the flag that selects a source (SourceSpec.Select): its source is the one its
	// flags name.
	Env []string
	// Usage says what the setting is, in a sentence (the flag's help).
	Usage string
}

// Kind is the type of a setting's value.
type Kind string

// Kinds of settings: a flag of that type, a JSON string, number or duration string.
const (
	KindString   Kind = "string"
	KindInt      Kind = "int"
	KindDuration Kind = "duration"
)

// Binding is a declared setting with its kind and default, as the binary's flags
// and the documentation show it, and, once read, its value and where it came from.
type Binding struct {
	Setting
	Kind Kind
	// Default is the value when nothing sets it, as text ("" for none).
	Default string
	// Value is the value read, as text (the default when unset).
	Value string
	// From is the name it was set under (a flag, a parameter or a variable); ""
	// when unset.
	From string
}

// Binder reads a source's settings from where the program takes them (the epp
// binary's flags, or a plugin's JSON parameters), each falling back to its
// environment variables and then to its default, checks each value that was set,
// and names each in errors as the user set it. A source binds its settings on a
// Binder in SourceSpec.Settings; the first error is kept and returned by the
// program's configuration step (Configure, Flags.Configure), so a source need not
// check Err.
type Binder struct {
	in       input // nil: the binder only collects the declarations (the binary's flags)
	getenv   func(string) string
	bound    []Binding         // in the order of binding
	names    map[string]string // Param -> the name it was set under
	set      map[string]bool   // Param -> set by the user (flag, parameter or env)
	err      error
	strs     map[string]string // Param -> value, of string settings (Namespace)
	consumed map[string]bool   // Params bound, for the unknown-parameter check
}

// input is where values come from: the binary's flags or a plugin's parameters.
type input interface {
	// lookup returns the text of s and the name it was set under, if it was set
	// there (a parameter's text is JSON).
	lookup(s Setting) (text, name string, ok bool)
	// name is what s is called there when unset.
	name(s Setting) string
	// env reports whether s falls back to its variables there.
	env(s Setting) bool
	// json reports whether texts are JSON.
	json() bool
}

// NewBinder returns a Binder that reads plugin parameters (a JSON object's fields;
// nil for none), each falling back to its variables, read with getenv (nil: none).
// ConfigureParams uses one; a source's Go API may too, to check a settings struct
// exactly as its parameters are checked.
func NewBinder(params map[string]json.RawMessage, getenv func(string) string) *Binder {
	return newBinder(paramInput(params), getenv)
}

func newBinder(in input, getenv func(string) string) *Binder {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &Binder{in: in, getenv: getenv, names: map[string]string{}, set: map[string]bool{},
		strs: map[string]string{}, consumed: map[string]bool{}}
}

// String binds the string setting s to p, whose value on entry is the default; check,
// if set, refuses a value that was set (its error says why, without the name).
func (b *Binder) String(p *string, s Setting, check func(string) error) {
	bind(b, p, s, KindString, func(v string) string { return v }, func(text string, isJSON bool) (string, error) {
		if !isJSON {
			return text, nil
		}
		var v string
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return "", errors.New("want a string")
		}
		return v, nil
	}, check)
	b.strs[s.Param] = *p
}

// Int binds the integer setting s to p (see String).
func (b *Binder) Int(p *int, s Setting, check func(int) error) {
	bind(b, p, s, KindInt, strconv.Itoa, func(text string, isJSON bool) (int, error) {
		if isJSON {
			var v int
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				return 0, errors.New("want a whole number")
			}
			return v, nil
		}
		v, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil {
			return 0, errors.New("not a number")
		}
		return v, nil
	}, check)
}

// Duration binds the duration setting s to p (see String): "200ms", "5s"; in JSON
// a string.
func (b *Binder) Duration(p *time.Duration, s Setting, check func(time.Duration) error) {
	bind(b, p, s, KindDuration, time.Duration.String, func(text string, isJSON bool) (time.Duration, error) {
		if isJSON {
			var v string
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				return 0, errors.New(`want a duration such as "5s"`)
			}
			text = v
		}
		d, err := time.ParseDuration(strings.TrimSpace(text))
		if err != nil {
			return 0, errors.New(`not a duration (e.g. "5s")`)
		}
		return d, nil
	}, check)
}

// bind reads s into p: where it was set (the flag or the parameter), else its first
// variable that is set, else p keeps its default. A value that was set is checked.
func bind[T any](b *Binder, p *T, s Setting, kind Kind, format func(T) string, parse func(text string, isJSON bool) (T, error), check func(T) error) {
	b.bound = append(b.bound, Binding{Setting: s, Kind: kind, Default: defaultText(*p, format)})
	b.consumed[s.Param] = true
	if b.in == nil {
		return
	}
	x := &b.bound[len(b.bound)-1]
	defer func() { x.Value = format(*p) }()
	text, name, ok := b.in.lookup(s)
	isJSON := ok && b.in.json()
	if !ok && b.in.env(s) {
		for _, env := range s.Env {
			if v := b.getenv(env); v != "" {
				text, name, ok = v, env, true
				break
			}
		}
	}
	if !ok {
		b.names[s.Param] = b.in.name(s)
		return
	}
	b.names[s.Param], b.set[s.Param], x.From = name, true, name
	v, err := parse(text, isJSON)
	// The value as the user wrote it: JSON as written; a flag's or variable's text
	// quoted, but for numbers and a flag's duration (as flags print them).
	shown := text
	if !isJSON && (err != nil || kind == KindString || kind == KindDuration && !strings.HasPrefix(name, "--")) {
		shown = strconv.Quote(text)
	}
	if err != nil {
		b.fail(fmt.Errorf("invalid %s=%s: %w", name, shown, err))
		return
	}
	if check != nil {
		if err := check(v); err != nil {
			b.fail(fmt.Errorf("invalid %s=%s: %w", name, shown, err))
			return
		}
	}
	*p = v
}

func defaultText[T any](v T, format func(T) string) string {
	var zero T
	if any(v) == any(zero) {
		return ""
	}
	return format(v)
}

func (b *Binder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Fail records an error of the source's own (a check of several settings
// together), unless one was recorded before.
func (b *Binder) Fail(err error) { b.fail(err) }

// Name is the name of s as the user set it (the flag, the parameter or the
// variable), or, when unset, as the program calls it (the flag in the binary, the
// parameter in a plugin): for errors.
func (b *Binder) Name(s Setting) string {
	if n, ok := b.names[s.Param]; ok {
		return n
	}
	if b.in == nil {
		return s.Param
	}
	return b.in.name(s)
}

// IsSet reports whether the user set s (its flag, its parameter, or a variable).
func (b *Binder) IsSet(s Setting) bool { return b.set[s.Param] }

// Namespace is the value of NamespaceSetting, which every source has ("" unset).
func (b *Binder) Namespace() string { return b.strs[NamespaceSetting.Param] }

// Err is the first error of the settings bound so far.
func (b *Binder) Err() error { return b.err }

// Bindings are the settings bound, in order.
func (b *Binder) Bindings() []Binding { return b.bound }

// flagInput reads the binary's flags that the user set. The binary reads no
// variable for a setting without a flag, nor for the flag that selects the source.
type flagInput struct {
	value   func(flag string) string
	set     map[string]bool
	selects string // Param of the source's SourceSpec.Select
}

func (f flagInput) env(s Setting) bool { return s.Flag != "" && s.Param != f.selects }

func (f flagInput) lookup(s Setting) (string, string, bool) {
	if s.Flag == "" || !f.set[s.Flag] {
		return "", "", false
	}
	return f.value(s.Flag), "--" + s.Flag, true
}

func (f flagInput) name(s Setting) string {
	if s.Flag == "" {
		return s.Param
	}
	return "--" + s.Flag
}

func (flagInput) json() bool { return false }

// paramInput reads a plugin's JSON parameters.
type paramInput map[string]json.RawMessage

func (p paramInput) lookup(s Setting) (string, string, bool) {
	raw, ok := p[s.Param]
	if !ok || string(raw) == "null" {
		return "", "", false
	}
	return string(raw), s.Param, true
}

func (paramInput) name(s Setting) string { return s.Param }
func (paramInput) env(Setting) bool      { return true }
func (paramInput) json() bool            { return true }
