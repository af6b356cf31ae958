package peerset_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

// FuzzState drives random event sequences (adds, updates, deletes, re-lists, slices
// moving endpoints, dual stack, duplicates, other Services) through the incremental
// State and asserts after every step that its set is Compute over the current
// slices, and that the change it returned is exactly the difference.
func FuzzState(f *testing.F) {
	f.Add([]byte{}, byte(3))
	f.Add([]byte{0, 1, 0, 0, 1, 1, 1, 2, 1, 1, 1, 0, 1, 2, 2, 1, 1, 3, 0, 1, 2, 1, 0, 1}, byte(1))
	f.Add([]byte{0, 0, 0, 0, 1, 1, 1, 4, 0, 0, 2, 3, 4, 1, 1, 2, 2, 1, 2, 0, 0, 9, 9, 1, 1, 2, 3, 1, 0, 0, 0, 5, 1}, byte(22))
	f.Add([]byte("slices move endpoints back and forth between dual-stack slices, and a relist"), byte(7))
	f.Fuzz(func(t *testing.T, data []byte, selfByte byte) {
		cfg := fuzzConfig(selfByte)
		st := peerset.NewState(cfg)
		current := map[string]discoveryv1.EndpointSlice{}
		shadow := map[string]peers.PeerMetadata{} // what the returned changes built
		r := &byteReader{b: data}
		for step := 0; step < 40 && len(r.b) > 0; step++ {
			var change peers.Change
			var what string
			switch op := r.pick(5); op {
			case 0, 1: // add or update a slice
				s := genSlice(r)
				current[s.Name] = s
				change, what = st.Upsert(&s), "upsert "+s.Name
			case 2: // delete a slice
				name := "epp-" + string(rune('a'+r.pick(4)))
				delete(current, name)
				change, what = st.Delete(name), "delete "+name
			case 3: // an endpoint moves from one slice to another
				from, to := "epp-"+string(rune('a'+r.pick(4))), "epp-"+string(rune('a'+r.pick(4)))
				a, okA := current[from]
				b, okB := current[to]
				if !okA || !okB || len(a.Endpoints) == 0 || from == to {
					continue
				}
				a, b = *a.DeepCopy(), *b.DeepCopy()
				b.Endpoints = append(b.Endpoints, a.Endpoints[0])
				a.Endpoints = a.Endpoints[1:]
				current[from], current[to] = a, b
				// The controller writes the slice gaining the endpoint first.
				apply(t, shadow, st.Upsert(&b))
				apply(t, shadow, st.Upsert(&a))
				check(t, "move "+from+" -> "+to, cfg, st, current, shadow)
				continue
			case 4: // re-list: some slices stay, some change, some go
				next := map[string]discoveryv1.EndpointSlice{}
				for name, s := range current {
					if r.pick(3) != 0 {
						next[name] = s
					}
				}
				for n := r.pick(3); n > 0; n-- {
					s := genSlice(r)
					next[s.Name] = s
				}
				current = next
				change, what = st.Replace(slices.Collect(maps.Values(next))), "relist"
			}
			apply(t, shadow, change)
			check(t, what, cfg, st, current, shadow)
		}
	})
}

// apply applies a change to the shadow set, failing on a change that is not minimal.
func apply(t *testing.T, shadow map[string]peers.PeerMetadata, c peers.Change) {
	t.Helper()
	for _, id := range c.Deletes {
		if _, ok := shadow[id]; !ok {
			t.Fatalf("change deletes %s, which is not a peer", id)
		}
		delete(shadow, id)
	}
	for _, p := range c.Upserts {
		if prev, ok := shadow[p.ID()]; ok && prev == p {
			t.Fatalf("change upserts %s unchanged", p.ID())
		}
		shadow[p.ID()] = p
	}
}

func check(t *testing.T, what string, cfg peerset.Config, st *peerset.State, current map[string]discoveryv1.EndpointSlice, shadow map[string]peers.PeerMetadata) {
	t.Helper()
	want := peerset.Compute(cfg, slices.Collect(maps.Values(current)))
	if diff := cmp.Diff(want, st.Peers()); diff != "" {
		t.Fatalf("after %s: State differs from Compute (-Compute +State):\n%s", what, diff)
	}
	got := slices.Collect(maps.Values(shadow))
	peers.SortByID(got)
	if len(got) == 0 {
		got = []peers.PeerMetadata{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after %s: the changes returned add up to another set (-Compute +changes):\n%s", what, diff)
	}
	if st.Len() != len(want) {
		t.Fatalf("after %s: Len %d, want %d", what, st.Len(), len(want))
	}
}

// TestStateOneEndpointChange: a readiness flip in one slice of many yields exactly
// that peer's delete, and back its upsert.
func TestStateOneEndpointChange(t *testing.T) {
	cfg := config(selfV4)
	st := peerset.NewState(cfg)
	a := slice("epp-a", pod("epp-1", "10.0.0.2"), pod("epp-2", "10.0.0.3"))
	b := slice("epp-b", pod("epp-3", "10.0.0.4"))
	if c := st.Replace([]discoveryv1.EndpointSlice{a, b}); len(c.Upserts) != 3 || len(c.Deletes) != 0 {
		t.Fatalf("initial change %+v", c)
	}
	a.Endpoints[1].Conditions.Ready = ptr.To(false)
	if diff := cmp.Diff(peers.Change{Deletes: []string{"ns/epp-2"}}, st.Upsert(&a)); diff != "" {
		t.Fatalf("readiness flip (-want +got):\n%s", diff)
	}
	if c := st.Replace([]discoveryv1.EndpointSlice{a, b}); !c.Empty() {
		t.Fatalf("a re-list of the same slices changed %+v", c)
	}
	if diff := cmp.Diff(peers.Change{Deletes: []string{"ns/epp-3"}}, st.Delete("epp-b")); diff != "" {
		t.Fatalf("slice deletion (-want +got):\n%s", diff)
	}
}

// TestStateSelfListed: whether the slices list this replica itself, by the rule the
// others' discovery applies to it (what a syncer waits for before it dials): not
// while it is not ready (membership ready), terminating, or absent; by name or by
// address; under membership alive, a standby is listed.
func TestStateSelfListed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		membership peers.Membership
		self       slicegen.SliceOption
		want       bool
	}{
		{"ready", peers.MembershipReady, pod("epp-0", "10.0.0.1"), true},
		{"not ready", peers.MembershipReady, pod("epp-0", "10.0.0.1", slicegen.NotReady()), false},
		{"not ready, membership alive", peers.MembershipAlive, pod("epp-0", "10.0.0.1", slicegen.NotReady()), true},
		{"terminating", peers.MembershipReady, pod("epp-0", "10.0.0.1", slicegen.TerminatingServing()), false},
		{"by its address", peers.MembershipReady, slicegen.Endpoint("", []string{"10.0.0.1"}), true},
		{"another pod at another address", peers.MembershipReady, pod("epp-9", "10.0.0.9"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(selfV4)
			cfg.Membership = tc.membership
			st := peerset.NewState(cfg)
			a := slice("epp-a", pod("epp-1", "10.0.0.2"), tc.self)
			st.Replace([]discoveryv1.EndpointSlice{a})
			if got := st.SelfListed(); got != tc.want {
				t.Fatalf("SelfListed = %v, want %v", got, tc.want)
			}
			// The slice goes: not listed; it comes back: as before.
			st.Delete("epp-a")
			if st.SelfListed() {
				t.Fatal("SelfListed after its slice was deleted")
			}
			st.Upsert(&a)
			if got := st.SelfListed(); got != tc.want {
				t.Fatalf("SelfListed after the slice came back = %v, want %v", got, tc.want)
			}
		})
	}
}
