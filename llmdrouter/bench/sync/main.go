// Command syncbench measures peer-syncer (this module's cross-replica syncer) side by
// side with upstream's LocalSyncer, in the same run, as llm-d-router's EPP drives a
// syncer. For each replica count N and endpoint count E, and each syncer in turn, it
// runs one measured replica process on a real API server (envtest), with the
// endpointslice peer discovery plugin on its Service's slices, and its N−1 peers as
// one swarm process (N−1 syncers whose membership is the measured replica alone, so
// that 30 replicas fit on 2 cores). Every replica publishes the in-flight load of E
// endpoints every interval (--change of them changed: all by default, the most a
// push carries) and, with --decisions, reads every endpoint's aggregate for each
// scheduling decision. It reports, for the measured replica:
//
//   - CPU: the process's CPU time over the window, as a share of one core; the
//     difference between the two syncers is what sharing costs;
//   - bytes sent per second, and per endpoint per push (one push per peer per
//     interval);
//   - visibility: from a replica's Set to the value being visible to a Get on
//     another replica (p50, p99), from a clock value every replica publishes.
//
// The run executes in a network namespace of its own (the replicas have addresses
// in 198.18.0.0/24 on its loopback). `make bench-sync` runs it and writes the table
// into docs/PERFORMANCE.md; `make bench-sync-smoke` (in make test) runs 3 replicas
// and 100 endpoints briefly and fails when the syncer does not share.
//
//	syncbench run [--replicas=3,10,30] [--endpoints=100,1000] [--change=1] [--window=10s] [--write=docs/PERFORMANCE.md] [--smoke]
//	syncbench replica ...   (the measured replica; started by run)
//	syncbench swarm ...     (its peers; started by run)
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: syncbench run|replica|swarm [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "replica":
		err = replicaMain(os.Args[2:])
	case "swarm":
		err = swarmMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want run, replica or swarm", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncbench:", err)
		os.Exit(1)
	}
}
