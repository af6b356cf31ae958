// Command routingbench measures how well active-active EPP replicas route, against
// one replica, on the real EPP build (cmd/epp) with llm-d-router's default
// scheduling profile, in front of simulated vLLM servers that keep a prefix KV
// cache (package modelsim). `make bench-routing` runs it and writes its tables into
// docs/PERFORMANCE.md and its plot into docs/; `make bench-routing-smoke` (in make
// test) runs one workload against 1 and 3 replicas and checks what does not
// depend on timing.
//
//	routingbench run [flags]        the benchmark (see run --help)
//	routingbench capacity [flags]   the EPP's CPU per request at 1, 3 and 8 replicas (make bench-capacity; see capacity --help)
//	routingbench modelsim [flags]   simulated model servers alone, on 127.0.0.1
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: routingbench run|capacity|modelsim [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "capacity":
		err = capacityMain(os.Args[2:])
	case "modelsim":
		err = modelsimMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want run, capacity or modelsim", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "routingbench:", err)
		os.Exit(1)
	}
}
