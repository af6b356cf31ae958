package main

import (
	"fmt"
	"slices"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/stats"
)

// footprint is a configuration's replicas at the end of its runs: their memory
// and, with the shared index, its size on each.
type footprint struct {
	config, title string
	replicas      int
	// rss and peak are each replica's resident memory then and at most (bytes).
	rss, peak []int64
	// blocks are each replica's shared index blocks (sharesIndex), every server
	// together.
	blocks []float64
}

// footprintOf reads configuration c's replicas procs.
func footprintOf(c configuration, procs []*eppProc) (footprint, error) {
	f := footprint{config: c.name, title: c.title, replicas: len(procs)}
	var err error
	if f.rss, f.peak, err = memoryOf(procs); err != nil {
		return f, err
	}
	if c.sharesIndex {
		ms, err := scrapeAll(procs)
		if err != nil {
			return f, err
		}
		for _, m := range ms {
			f.blocks = append(f.blocks, m.blocks)
		}
	}
	return f, nil
}
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func (f footprint) summary() string {
	s := fmt.Sprintf("memory per replica %s (peak %s at most)", mib(stats.Median(f.rss)), mib(slices.Max(f.peak)))
	if len(f.blocks) > 0 {
		s += fmt.Sprintf(", shared index %.0f to %.0f blocks", slices.Min(f.blocks), slices.Max(f.blocks))
	}
	return s
}
