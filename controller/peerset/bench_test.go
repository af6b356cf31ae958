package peerset_test

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

// benchSlices returns n ready endpoints in slices of at most 100, the way the
// EndpointSlice controller packs them, with self as endpoint 0.
func benchSlices(n int) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for start := 0; start < n; start += 100 {
		var opts []slicegen.SliceOption
		for i := start; i < min(start+100, n); i++ {
			opts = append(opts, slicegen.Pod(fmt.Sprintf("epp-%d", i), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)))
		}
		out = append(out, slicegen.Slice(fmt.Sprintf("epp-%05d", start/100), opts...))
	}
	return out
}

func BenchmarkCompute(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			in := benchSlices(n)
			cfg := config(peers.Self{Name: "epp-0"})
			b.ReportAllocs()
			for b.Loop() {
				if got := peerset.Compute(cfg, in); len(got) != n-1 {
					b.Fatalf("got %d peers, want %d", len(got), n-1)
				}
			}
		})
	}
}

// BenchmarkOneEndpointChange is what one event costs when one endpoint of a
// 10,000-endpoint Service flips readiness, done two ways in the same run:
// "full" recomputes the whole set, diffs it against the last published set and
// applies the change to a store (what epp did before State, and what a plain
// informer does); "incremental" updates State with the one changed slice and
// applies its change to a store (what epp does).
func BenchmarkOneEndpointChange(b *testing.B) {
	const n = 10000
	cfg := config(peers.Self{Name: "epp-0"})
	b.Run("full", func(b *testing.B) {
		in := benchSlices(n)
		store := peers.NewMemoryPeerStore()
		tracker := peers.NewTracker(store)
		tracker.Publish(peerset.Compute(cfg, in))
		ep := &in[50].Endpoints[42]
		ready := true
		b.ReportAllocs()
		for b.Loop() {
			ready = !ready
			ep.Conditions.Ready = &ready
			c := tracker.Publish(peerset.Compute(cfg, in))
			if len(c.Upserts)+len(c.Deletes) != 1 {
				b.Fatalf("change %+v, want exactly one peer", c)
			}
		}
	})
	b.Run("incremental", func(b *testing.B) {
		in := benchSlices(n)
		store := peers.NewMemoryPeerStore()
		st := peerset.NewState(cfg)
		store.ApplyPeerChange(st.Replace(in))
		sl := in[50].DeepCopy()
		ep := &sl.Endpoints[42]
		ready := true
		b.ReportAllocs()
		for b.Loop() {
			ready = !ready
			ep.Conditions.Ready = &ready
			c := st.Upsert(sl)
			if len(c.Upserts)+len(c.Deletes) != 1 {
				b.Fatalf("change %+v, want exactly one peer", c)
			}
			store.ApplyPeerChange(c)
		}
	})
}
