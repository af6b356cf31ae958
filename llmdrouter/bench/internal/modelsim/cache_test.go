package modelsim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// run is one request through a cache: it allocates for prompt (hit up to maxHit,
// total blocks), commits the prompt blocks past the hit, and frees.
func run(t *testing.T, c *Cache, prompt []uint64, maxHit, total int) int {
	t.Helper()
	a, hit, ok := c.Allocate(prompt, maxHit, total)
	if !ok {
		t.Fatalf("no room for %d blocks (held %d, cached %d, capacity %d)", total, c.Held(), c.Cached(), c.Capacity())
	}
	c.Commit(a, prompt[hit:])
	c.Free(a)
	return hit
}

func TestCacheHitIsTheLongestCachedPrefix(t *testing.T) {
	c := NewCache(100)
	run(t, c, []uint64{1, 2, 3, 4}, 10, 4)
	for _, tc := range []struct {
		name   string
		prompt []uint64
		maxHit int
		want   int
	}{
		{"same blocks", []uint64{1, 2, 3, 4}, 10, 4},
		{"a longer prompt", []uint64{1, 2, 3, 4, 5, 6}, 10, 4},
		{"diverges after two", []uint64{1, 2, 9, 4}, 10, 2},
		{"cached blocks after a miss do not count", []uint64{9, 2, 3, 4}, 10, 0},
		{"a shorter prompt", []uint64{1, 2}, 10, 2},
		{"capped (one token must be computed)", []uint64{1, 2, 3, 4}, 3, 3},
		{"nothing cached", []uint64{7, 8}, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, hit, ok := c.Allocate(tc.prompt, tc.maxHit, len(tc.prompt)+1)
			if !ok {
				t.Fatal("no room")
			}
			defer c.Free(a)
			if hit != tc.want {
				t.Errorf("hit %d blocks, want %d", hit, tc.want)
			}
		})
	}
	if c.Held() != 0 {
		t.Errorf("%d blocks still held after every request was freed", c.Held())
	}
}

func TestCacheEvictsLeastRecentlyFreedFirst(t *testing.T) {
	c := NewCache(6)
	run(t, c, []uint64{1, 2}, 9, 2)                    // free: 2 1 (a request's tail goes first)
	run(t, c, []uint64{3, 4}, 9, 2)                    // free: 2 1 4 3
	run(t, c, []uint64{5, 6}, 9, 2)                    // free: 2 1 4 3 6 5
	if hit := run(t, c, []uint64{3}, 9, 1); hit != 1 { // 3 used again: 2 1 4 6 5 3
		t.Fatalf("block 3 not hit")
	}
	// A request of 3 new blocks evicts the 3 least recently freed: 2, 1 and 4.
	run(t, c, []uint64{7, 8, 9}, 9, 3)
	for h, want := range map[uint64]bool{1: false, 2: false, 4: false, 3: true, 5: true, 6: true, 7: true, 8: true, 9: true} {
		if got := c.Contains(h); got != want {
			t.Errorf("block %d cached: %v, want %v", h, got, want)
		}
	}
	if c.Cached() != 6 {
		t.Errorf("%d blocks cached, want 6 (the capacity)", c.Cached())
	}
}

func TestCacheNeverEvictsHeldBlocks(t *testing.T) {
	c := NewCache(4)
	a, _, _ := c.Allocate([]uint64{1, 2}, 9, 3) // holds 1 and 2 hashed, plus one anonymous
	c.Commit(a, []uint64{1, 2})
	if got := c.Usage(); got != 0.75 {
		t.Errorf("usage %v with 3 of 4 blocks held, want 0.75", got)
	}
	// Two more blocks do not fit: only one is empty, none free.
	if _, _, ok := c.Allocate([]uint64{5, 6}, 9, 2); ok {
		t.Fatal("allocated 2 blocks with 1 left")
	}
	if c.Held() != 3 || c.Cached() != 2 {
		t.Fatalf("a refused allocation changed the cache: held %d, cached %d", c.Held(), c.Cached())
	}
	// A request that shares the held prefix needs only its own blocks.
	b, hit, ok := c.Allocate([]uint64{1, 2, 7}, 9, 3)
	if !ok || hit != 2 {
		t.Fatalf("shared prefix: ok %v hit %d, want true 2", ok, hit)
	}
	c.Commit(b, []uint64{7})
	c.Free(b)
	c.Free(a)
	if c.Held() != 0 || c.Cached() != 3 {
		t.Errorf("after both: held %d cached %d, want 0 and 3", c.Held(), c.Cached())
	}
}

func TestCacheDuplicateBlocksStayAnonymous(t *testing.T) {
	c := NewCache(10)
	a, _, _ := c.Allocate([]uint64{1, 2}, 9, 2)
	b, _, _ := c.Allocate([]uint64{1, 2}, 9, 2) // the same prompt, before a's prefill ended
	c.Commit(a, []uint64{1, 2})
	c.Commit(b, []uint64{1, 2}) // already cached: b holds a's blocks, keeps its own anonymous
	if c.Held() != 4 || c.Cached() != 2 {
		t.Fatalf("held %d cached %d, want 4 (2 shared, 2 duplicates) and 2", c.Held(), c.Cached())
	}
	c.Free(a)
	c.Free(b)
	if c.Held() != 0 || c.Cached() != 2 {
		t.Errorf("after both: held %d cached %d, want 0 and 2", c.Held(), c.Cached())
	}
}

// TestCacheAgainstModel runs random requests of chained block sequences through a
// small cache and checks each hit against the longest prefix a brute-force model
// holds, and each eviction against the model's least recently freed block.
func TestCacheAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache(40)
	// The model: cached blocks in the order they were last freed (oldest first).
	var model []uint64
	chains := make([][]uint64, 12) // sequences sharing prefixes, as conversations do
	for i := range chains {
		base := uint64(i%3) * 1000
		for j := range 4 + rng.IntN(12) {
			h := base + uint64(j)
			if j >= 2 {
				h = uint64(i)*1000 + 500 + uint64(j)
			}
			chains[i] = append(chains[i], h)
		}
	}
	for step := range 2000 {
		prompt := chains[rng.IntN(len(chains))]
		prompt = prompt[:1+rng.IntN(len(prompt))]
		want := 0
		for _, h := range prompt {
			if !slices.Contains(model, h) {
				break
			}
			want++
		}
		hit := run(t, c, prompt, len(prompt), len(prompt))
		if hit != want {
			t.Fatalf("step %d: hit %d blocks of %v, the model's longest cached prefix is %d", step, hit, prompt, want)
		}
		// The model: the prompt's blocks are freed tail first, so they end up (most
		// recent last) in the order prompt[n-1] ... prompt[0]; then the oldest go.
		model = slices.DeleteFunc(model, func(h uint64) bool { return slices.Contains(prompt, h) })
		for i := len(prompt) - 1; i >= 0; i-- {
			model = append(model, prompt[i])
		}
		if len(model) > c.Capacity() {
			model = model[len(model)-c.Capacity():]
		}
		if c.Cached() != len(model) {
			t.Fatalf("step %d: %d blocks cached, the model has %d", step, c.Cached(), len(model))
		}
		for _, h := range model {
			if !c.Contains(h) {
				t.Fatalf("step %d: block %d evicted, but the model still has it (blocks freed less recently were there)", step, h)
			}
		}
	}
}
