package discovery

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Flags are the flags of a program's peer sources (the epp binary's): one flag for
// every setting of every source that has one, NamespaceSetting's included, each
// registered once. Sources that share a flag (--epp-peer-port) must declare it the
// same way.
type Flags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	specs  []SourceSpec
	owners map[string][]string // flag -> the sources that have it
}

// AddFlags registers the flags of specs on fs; getenv reads the variables that
// settings fall back to. It panics when two sources declare one flag differently
// (a programming error that a test of the program's source list catches).
func AddFlags(fs *flag.FlagSet, getenv func(string) string, specs []SourceSpec) *Flags {
	f := &Flags{fs: fs, getenv: getenv, specs: specs, owners: map[string][]string{}}
	declared := map[string]Binding{}
	var order []string
	for _, spec := range specs {
		selects := false
		for _, x := range Declared(spec) {
			if x.Param == spec.Select.Param {
				selects = true
			}
			if x.Flag == "" {
				continue
			}
			f.owners[x.Flag] = append(f.owners[x.Flag], spec.Name)
			if prev, ok := declared[x.Flag]; ok {
				if !reflect.DeepEqual(prev, x) {
					panic(fmt.Sprintf("peer sources %s declare --%s differently: %+v and %+v", strings.Join(f.owners[x.Flag], " and "), x.Flag, prev, x))
				}
				continue
			}
			declared[x.Flag] = x
			order = append(order, x.Flag)
		}
		if !selects || spec.Select.Flag == "" {
			panic(fmt.Sprintf("peer source %s: its Select setting %q is not one of its settings with a flag", spec.Name, spec.Select.Param))
		}
	}
	for _, x := range DeclaredExtras() { // every source's, so none owns them
		if x.Flag == "" {
			continue
		}
		if _, ok := declared[x.Flag]; ok {
			panic(fmt.Sprintf("a peer source declares --%s, a flag of the extras", x.Flag))
		}
		declared[x.Flag] = x
		order = append(order, x.Flag)
	}
	for _, name := range order {
		x := declared[name]
		usage := x.Usage
		if owners := f.owners[name]; len(owners) == 1 && !f.selects(name) {
			usage = "With --" + f.spec(owners[0]).Select.Flag + ": " + lowerFirst(usage)
		}
		if env := x.Env; len(env) > 0 && !f.selects(name) {
			usage += " Default from env " + strings.Join(env, ", else ") + "."
		}
		switch x.Kind {
		case KindInt:
			n, _ := strconv.Atoi(x.Default)
			fs.Int(name, n, usage)
		case KindDuration:
			d, _ := time.ParseDuration(x.Default)
			fs.Duration(name, d, usage)
		default:
			fs.String(name, x.Default, usage)
		}
	}
	return f
}

// Specs are the sources, in order.
func (f *Flags) Specs() []SourceSpec { return f.specs }

// spec is the source named name.
func (f *Flags) spec(name string) SourceSpec {
	for _, s := range f.specs {
		if s.Name == name {
			return s
		}
	}
	return SourceSpec{}
}

// lowerFirst lowers the first letter of a sentence that continues another ("How
// often" -> "how often"), not of an acronym ("SRV name").
func lowerFirst(s string) string {
	if len(s) > 1 && unicode.IsUpper(rune(s[0])) && (unicode.IsLower(rune(s[1])) || s[1] == ' ') {
		return string(unicode.ToLower(rune(s[0]))) + s[1:]
	}
	return s
}

// selects reports whether flag selects a source.
func (f *Flags) selects(flag string) bool {
	for _, s := range f.specs {
		if s.Select.Flag == flag {
			return true
		}
	}
	return false
}

// input is what the flags hold once parsed, for the source whose Select is selects.
func (f *Flags) input(selects string) flagInput {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return flagInput{value: func(name string) string { return f.fs.Lookup(name).Value.String() }, set: set, selects: selects}
}

// Selected are the sources whose selecting flag was set, in the order of the
// sources, with the flag's value.
func (f *Flags) Selected() (specs []SourceSpec, values []string) {
	in := f.input("")
	for _, s := range f.specs {
		if v, _, ok := in.lookup(s.Select); ok && v != "" {
			specs, values = append(specs, s), append(values, v)
		}
	}
	return specs, values
}

// Check reads every source's settings as the flags and variables set them and
// returns the first error: a bad value is refused whichever source is selected.
func (f *Flags) Check() error {
	for _, s := range f.specs {
		b := newBinder(f.input(s.Select.Param), f.getenv)
		bindAll(s, b)
		if err := b.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Extras reads the extras (BindExtras) from the flags, each falling back to its
// variables and its default. Errors are one line naming the flag, or the variable
// the value came from.
func (f *Flags) Extras() (Extras, error) {
	b := newBinder(f.input(""), f.getenv)
	var e Extras
	BindExtras(b, &e)
	return e, b.Err()
}

// Namespace is the value of NamespaceSetting ("" when unset).
func (f *Flags) Namespace() (string, error) {
	b := newBinder(f.input(""), f.getenv)
	var ns string
	b.String(&ns, NamespaceSetting, CheckNamespace)
	return ns, b.Err()
}

// Configure reads spec's settings from the flags (each falling back to its
// variables and its default, but for the flag that selects it), checks them, and
// reads this replica from the downward-API variables (see ConfigureParams).
// Errors are one line naming the flag, or the variable the value came from.
func (f *Flags) Configure(spec SourceSpec, hostname func() (string, error)) (*Configured, error) {
	b := newBinder(f.input(spec.Select.Param), f.getenv)
	bound := bindAll(spec, b)
	return complete(spec, b, bound, hostname)
}

// Unused are the flags of sources that were set but that spec does not have: they
// have no effect with it.
func (f *Flags) Unused(spec SourceSpec) []string {
	var out []string
	f.fs.Visit(func(fl *flag.Flag) {
		owners, ok := f.owners[fl.Name]
		if !ok {
			return // not a source's flag
		}
		for _, o := range owners {
			if o == spec.Name {
				return
			}
		}
		out = append(out, "--"+fl.Name)
	})
	return out
}
