package sharedprefix

import (
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// PublishRaw publishes msg to p's peers as it is: a hand-built placement, as a
// hostile or broken peer would send.
func (p *Plugin) PublishRaw(msg []byte) {
	p.bc.Publish(msg)
	p.published.Add(1)
}

// RawPlacement encodes a placement that routes hashes (positions 0, 1, ...) to
// server, with capacity and at as given.
func RawPlacement(server string, capacity int, at int64, hashes []uint64) []byte {
	pl := placement{server: server, capacity: capacity, at: at}
	for _, h := range hashes {
		pl.hashes = append(pl.hashes, blockHash(h))
	}
	return encodePlacement(&pl)
}

// Placements is epp_shared_prefix_placements_total of the plugin instance and
// origin.
func Placements(instance, origin string) float64 {
	return testutil.ToFloat64(placements.WithLabelValues(instance, origin))
}

// SetClockOffset shifts p's clock (as ClockOffsetEnv does for a process).
func (p *Plugin) SetClockOffset(d time.Duration) { p.offset = d }
