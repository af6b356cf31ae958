package fleetmetrics

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestEveryServerHasOneOwnerWhateverTheOrder: every replica computes the same
// owner for a server from the same members, in whatever order it lists them.
func TestEveryServerHasOneOwnerWhateverTheOrder(t *testing.T) {
	members := names("ns/epp", 8)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range names("llm/vllm", 200) {
		want := owner(s, members)
		shuffled := slices.Clone(members)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := owner(s, shuffled); got != want || !slices.Contains(members, got) {
			t.Fatalf("%s: owner %s in one order, %s in another", s, want, got)
		}
	}
}

// TestOwnershipMovesMinimally: a replica that joins takes only servers it wins (about
// one in N+1), each from its owner before, and one that leaves gives only its own
// away; the servers are spread evenly.
func TestOwnershipMovesMinimally(t *testing.T) {
	servers := names("llm/vllm", 2000)
	members := names("ns/epp", 8)
	before := map[string]string{}
	count := map[string]int{}
	for _, s := range servers {
		before[s] = owner(s, members)
		count[before[s]]++
	}
	for m, n := range count {
		if n < 2000/8*7/10 || n > 2000/8*13/10 {
			t.Errorf("%s owns %d of 2000 servers, want within 30%% of %d", m, n, 2000/8)
		}
	}
	joined := append(slices.Clone(members), "ns/epp-new")
	moved := 0
	for _, s := range servers {
		if o := owner(s, joined); o != before[s] {
			if o != "ns/epp-new" {
				t.Fatalf("%s moved from %s to %s when ns/epp-new joined", s, before[s], o)
			}
			moved++
		}
	}
	if moved < 2000/9*7/10 || moved > 2000/9*13/10 {
		t.Errorf("%d servers moved to the replica that joined, want about %d", moved, 2000/9)
	}
	left := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == "ns/epp-3" })
	for _, s := range servers {
		if o := owner(s, left); o != before[s] && before[s] != "ns/epp-3" {
			t.Fatalf("%s moved from %s to %s when ns/epp-3 left", s, before[s], o)
		}
	}
}

// TestMembersAreThoseHeardWithinTheTTL: a peer counts while its last message is
// within the TTL, and this replica always.
func TestMembersAreThoseHeardWithinTheTTL(t *testing.T) {
	now := time.Now()
	l := liveness{"ns/epp-1": now.Add(-100 * time.Millisecond), "ns/epp-2": now.Add(-300 * time.Millisecond)}
	if got := l.members("ns/epp-0", now, 250*time.Millisecond); !slices.Equal(got, []string{"ns/epp-0", "ns/epp-1"}) {
		t.Errorf("members %v, want ns/epp-0 and ns/epp-1", got)
	}
}
