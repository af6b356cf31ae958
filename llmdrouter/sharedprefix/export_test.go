package sharedprefix

import (
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// SetHoldFor sets how long a placement for an endpoint the pool does not list is
// held (HoldFor), for the test; the returned func restores it.
func SetHoldFor(d time.Duration) func() {
	old := holdFor
	holdFor = d
	return func() { holdFor = old }
}

// PublishRaw publishes msg to p's peers as it is: a hand-built placement, as a
// hostile or broken peer would send.
func (p *Plugin) PublishRaw(msg []byte) {
	p.bc.Publish(msg)
	p.published.Add(1)
}

// Raw placements, for the hostile tests.

// RawPlacement encodes a placement of version 2 that adds hashes to server, with
// capacity and at as given.
func RawPlacement(server string, capacity int, at int64, hashes []uint64) []byte {
	o := op{kind: opAdd}
	for _, h := range hashes {
		o.hashes = append(o.hashes, blockHash(h))
	}
	return encodePlacement(&placement{server: server, capacity: capacity, at: at, ops: []op{o}})
}

// RawSnapshotPlacement encodes a placement of version 2 with snapshot blocks.
func RawSnapshotPlacement(server string, hashes []uint64) []byte {
	o := op{kind: opOlder}
	for _, h := range hashes {
		o.hashes = append(o.hashes, blockHash(h), 0)
	}
	return encodePlacement(&placement{server: server, capacity: 1, ops: []op{o}})
}

// Placements is epp_shared_prefix_placements_total of the plugin instance and
// origin.
func Placements(instance, origin string) float64 {
	return testutil.ToFloat64(placements.WithLabelValues(instance, origin))
}
