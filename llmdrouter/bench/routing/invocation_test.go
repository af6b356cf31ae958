package main

import (
	"testing"
)

// A section names the command that wrote it: the target alone when the target ran
// it as it is, the added flags when a run had others, never the target's own.
func TestMakeInvocationNamesTheFlagsARunAdded(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--epp=/r/bin/epp-llmd", "--write=/r/docs/PERFORMANCE.md", "--quote=/r/README.md", "--plot=/r/docs/capacity-bench.svg"}, "`make bench-capacity`"},
		{[]string{"--epp=/r/bin/epp-llmd", "--write=/r/docs/PERFORMANCE.md", "--rounds=8", "--configs=single,shared-index-loaded"},
			"`make bench-capacity BENCH_CAPACITY_FLAGS='--configs=single,shared-index-loaded --rounds=8'`"},
	} {
		o, err := parseCapacityOptions(append(tc.args, "--epp=invocation_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		if o.measuredBy != tc.want {
			t.Errorf("capacity %v: measured by %s, want %s", tc.args, o.measuredBy, tc.want)
		}
	}
	o, err := parseRunOptions([]string{"--epp=invocation_test.go", "--write=x.md", "--quick"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "`make bench-routing BENCH_ROUTING_FLAGS='--quick'`"; o.measuredBy != want {
		t.Errorf("run --quick: measured by %s, want %s", o.measuredBy, want)
	}
}

func TestEppName(t *testing.T) {
	for path, want := range map[string]string{
		"/work/main/bin/epp-llmd": "bin/epp-llmd",
		"../bin/epp-nomerge":      "bin/epp-nomerge",
		"/tmp/x/epp":              "/tmp/x/epp",
	} {
		if got := eppName(path); got != want {
			t.Errorf("eppName(%q) = %q, want %q", path, got, want)
		}
	}
}
