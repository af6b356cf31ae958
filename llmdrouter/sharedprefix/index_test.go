package sharedprefix

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"
)

func hs(xs ...uint64) []blockHash {
	out := make([]blockHash, len(xs))
	for i, x := range xs {
		out[i] = blockHash(x)
	}
	return out
}

func matches(x *index, hashes []blockHash) map[string]int {
	m := map[string]int{}
	x.match(hashes, m)
	return m
}

// contents is a server's blocks with their stamps.
func contents(x *index, server string) map[blockHash]stamp {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := map[blockHash]stamp{}
	if s := x.servers[server]; s != nil {
		for _, i := range s.heap {
			out[s.slots[i].hash] = s.slots[i].stamp
		}
	}
	return out
}

// everything is a server's blocks as entries (what a repair of every leaf sends).
func everything(x *index, server string) []entry {
	var out []entry
	for h, s := range contents(x, server) {
		out = append(out, entry{hash: h, stamp: s})
	}
	return out
}

// conversation is n blocks of a prompt of its own.
func conversation(seed uint64, n int) []blockHash {
	out := make([]blockHash, n)
	h := seed * 0x9e3779b97f4a7c15
	for i := range out {
		h = h*6364136223846793005 + 1442695040888963407
		out[i] = blockHash(h | 1)
	}
	return out
}

// TestIndexMatchesAsUpstream: every server holding a block counts one, walking the
// request's blocks until one that no server holds.
func TestIndexMatchesAsUpstream(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 10, hs(1, 2, 3), 100)
	x.route("ns/b", 10, hs(1, 9), 100)
	got := matches(x, hs(1, 2, 3, 4, 9))
	if want := map[string]int{"ns/a": 3, "ns/b": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("match %v, want %v (stop at 4, which no server holds)", got, want)
	}
	if got := matches(x, hs(5, 1)); len(got) != 0 {
		t.Fatalf("a first block nobody holds: %v", got)
	}
}

// TestIndexEvictsTheOldest: a full server evicts its least recent block, as
// upstream's LRU does: a request makes every block it covers the most recent, its
// later blocks more recent than its earlier ones; a block older than every one
// held does not go in.
func TestIndexEvictsTheOldest(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 4, hs(1, 2, 3), 100)
	x.route("ns/a", 4, hs(1), 200) // 1 is the most recent now: 2 is the oldest
	x.route("ns/a", 4, hs(7, 8), 300)
	got := slices.Sorted(maps.Keys(contents(x, "ns/a")))
	if want := hs(1, 3, 7, 8); !slices.Equal(got, want) {
		t.Fatalf("holds %v, want %v (2, then nothing else, evicted)", got, want)
	}
	x.apply("ns/a", 4, 50, 0, hs(99)) // decided before everything held
	if _, ok := contents(x, "ns/a")[99]; ok {
		t.Error("a block older than every block of a full server went in")
	}
	x.route("ns/a", 2, hs(5), 400) // the capacity falls: the oldest go
	if got := slices.Sorted(maps.Keys(contents(x, "ns/a"))); !slices.Equal(got, hs(5, 8)) {
		t.Errorf("after the capacity fell to 2: %v, want [5 8]", got)
	}
}

// placements is a random workload: n decisions over convs conversations (reused
// with longer prefixes, as multi-turn), on servers, at distinct times.
type placementOp struct {
	server string
	at     int64
	hashes []blockHash
}

func workloadOf(rng *rand.Rand, n, convs int, servers []string) []placementOp {
	cs := make([][]blockHash, convs)
	for i := range cs {
		cs[i] = conversation(uint64(i+1), 5+rng.IntN(40))
	}
	var ops []placementOp
	for i := range n {
		c := cs[rng.IntN(len(cs))]
		ops = append(ops, placementOp{server: servers[rng.IntN(len(servers))], at: int64(1_000_000 + 10*i + rng.IntN(30)), hashes: c[:1+rng.IntN(len(c))]})
	}
	return ops
}

func applyAll(x *index, capacity int, ops []placementOp) {
	for _, o := range ops {
		x.apply(o.server, capacity, o.at, 0, o.hashes)
	}
}

func same(t *testing.T, what string, a, b *index, servers []string) {
	t.Helper()
	for _, s := range servers {
		if ca, cb := contents(a, s), contents(b, s); !maps.Equal(ca, cb) {
			t.Fatalf("%s: server %s holds %d blocks in one and %d in the other, not the same", what, s, len(ca), len(cb))
		}
	}
	if da, db := digestOf(a.serverStates()), digestOf(b.serverStates()); da != db {
		t.Fatalf("%s: the same blocks, but digests %x and %x", what, da, db)
	}
}

// TestTheMergeIsOrderIndependent: the same placements, merged in any order, any
// number of times, or split between indexes that then merge each other's blocks
// (a repair), give the same index with the same digest, full servers included:
// the merge is commutative, associative and idempotent. Arrival-order eviction (an
// LRU that takes placements as they come) was not: full LRUs that took the same
// placements in another order held other blocks.
func TestTheMergeIsOrderIndependent(t *testing.T) {
	servers := []string{"ns/a", "ns/b"}
	const capacity = 60 // full many times over
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ops := workloadOf(rng, 400, 30, servers)
		ref := newIndex()
		applyAll(ref, capacity, ops)
		if len(contents(ref, "ns/a")) != capacity {
			t.Fatalf("seed %d: server a holds %d blocks: the workload does not fill it", seed, len(contents(ref, "ns/a")))
		}
		// Another order, with duplicates.
		shuffled := slices.Clone(ops)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, shuffled[:100]...)
		other := newIndex()
		applyAll(other, capacity, shuffled)
		same(t, "another order with duplicates", ref, other, servers)

		// Split in three, each part to its own index; then repairs in two
		// groupings: ((x ⊔ y) ⊔ z) and (x ⊔ (y ⊔ z)), each with its own blocks
		// merged twice.
		parts := [3][]placementOp{}
		for _, o := range ops {
			k := rng.IntN(3)
			parts[k] = append(parts[k], o)
		}
		build := func() [3]*index {
			var xs [3]*index
			for i := range xs {
				xs[i] = newIndex()
				applyAll(xs[i], capacity, parts[i])
			}
			return xs
		}
		into := func(dst, src *index) {
			for _, s := range servers {
				dst.merge(s, capacity, everything(src, s))
				dst.merge(s, capacity, everything(src, s))
			}
		}
		left := build()
		into(left[0], left[1])
		into(left[0], left[2])
		right := build()
		into(right[1], right[2])
		into(right[0], right[1])
		same(t, "(x ⊔ y) ⊔ z against the placements in order", ref, left[0], servers)
		same(t, "x ⊔ (y ⊔ z) against the placements in order", ref, right[0], servers)
		into(left[1], left[0]) // y ⊔ (x ⊔ y ⊔ z) is x ⊔ y ⊔ z
		same(t, "a repair with an index that holds it already", left[0], left[1], servers)
	}
}

// TestDigestsSayWhatIsHeld: indexes that hold the same blocks with the same stamps
// have the same digests, whatever they took in between; the same blocks with
// another stamp (a refresh one missed) do not.
func TestDigestsSayWhatIsHeld(t *testing.T) {
	a, b := newIndex(), newIndex()
	a.route("ns/a", 100, hs(1, 2, 3), 10)
	a.route("ns/a", 100, hs(1, 2), 20)
	b.route("ns/a", 100, hs(1, 2), 20)
	b.route("ns/a", 100, hs(1, 2, 3), 10)
	if da, db := a.serverStates()["ns/a"].digest, b.serverStates()["ns/a"].digest; da != db {
		t.Fatalf("the same placements in another order: digests %x and %x", da, db)
	}
	c := newIndex()
	c.route("ns/a", 100, hs(1, 2, 3), 10)
	if a.serverStates()["ns/a"].digest == c.serverStates()["ns/a"].digest {
		t.Fatal("an index that missed a refresh of two blocks has the same digest")
	}
	x := newIndex()
	x.route("ns/a", 100, hs(1, 2, 3), 10)
	x.removeServer("ns/a")
	if len(x.serverStates()) != 0 || x.entries() != 0 || len(matches(x, hs(1))) != 0 {
		t.Fatal("a server removed left blocks behind")
	}
}

// TestARefreshOfBlocksAReplicaLacksAddsThem: a placement names every block of the
// request, so a replica that missed the one that added the first blocks gets them
// with the next one that reuses them. A touch of a chain by its last block and
// length, as before, touched nothing where the chain was missing.
func TestARefreshOfBlocksAReplicaLacksAddsThem(t *testing.T) {
	conv := conversation(5, 20)
	full, missed := newIndex(), newIndex()
	full.route("ns/a", 100, conv[:10], 100)
	// missed lost that placement; the next turn reuses the prefix.
	for _, x := range []*index{full, missed} {
		x.apply("ns/a", 100, 200, 0, conv)
	}
	same(t, "after the next turn", full, missed, []string{"ns/a"})
	if got := matches(missed, conv)["ns/a"]; got != 20 {
		t.Errorf("the replica that missed the first turn matches %d of 20 blocks", got)
	}
}

// TestARepairIntoAFullServerKeepsTheNewest: merging a peer's blocks into a full
// server keeps the newest capacity of both, whatever arrived first: a resync added
// nothing to a full LRU before.
func TestARepairIntoAFullServerKeepsTheNewest(t *testing.T) {
	const capacity = 50
	old, fresh := newIndex(), newIndex()
	for i := range 5 {
		old.route("ns/a", capacity, conversation(uint64(i), 20), int64(100+i))        // full, older
		fresh.route("ns/a", capacity, conversation(uint64(100+i), 20), int64(1000+i)) // full, newer
	}
	old.merge("ns/a", capacity, everything(fresh, "ns/a"))
	same(t, "a full server repaired from a full peer with newer blocks", old, fresh, []string{"ns/a"})
}

// TestMemoryPerBlock: the index's cost per block, which bounds its memory (servers
// × capacity × this, and bytesPerServer a server). Upstream's LRU took about 426
// bytes a block; the log version's index 116.
func TestMemoryPerBlock(t *testing.T) {
	const servers, perServer = 8, 25000
	before := heap()
	x := newIndex()
	for s := range servers {
		name := []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f", "ns/g", "ns/h"}[s]
		for c := range perServer / 100 {
			x.route(name, perServer, conversation(uint64(s*100000+c), 100), int64(c+1))
		}
	}
	per := (float64(heap()-before) - servers*bytesPerServer) / float64(x.entries())
	t.Logf("%d blocks: %.0f bytes a block, %d a server besides", x.entries(), per, bytesPerServer)
	if x.entries() != servers*perServer {
		t.Fatalf("%d blocks, want %d", x.entries(), servers*perServer)
	}
	if per > 1.3*bytesPerBlock {
		t.Errorf("%.0f bytes a block, want about bytesPerBlock (%d), which the docs and epp_shared_prefix_index_bytes state", per, bytesPerBlock)
	}
	runtime.KeepAlive(x)
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestPlacementRoundTripAndBounds: a placement decodes to what was encoded, 8
// bytes a block; the log version's placements and what breaks a bound are refused.
func TestPlacementRoundTripAndBounds(t *testing.T) {
	in := placement{server: "llm/vllm-3-rank-0", capacity: 31250, at: 1_700_000_000_000_000, first: 7, hashes: hs(1, 1<<63, 42)}
	b := encodePlacement(&in)
	var out placement
	if err := parsePlacement(&out, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	size := func(n int) int {
		return len(encodePlacement(&placement{server: in.server, capacity: 1, at: in.at, hashes: make([]blockHash, n)}))
	}
	if per := float64(size(100)-size(1)) / 99; per != 8 {
		t.Errorf("%v bytes a block, want 8", per)
	}
	ok := func(f func(p *placement)) []byte {
		p := placement{server: "x", capacity: 1, at: 1, hashes: hs(1)}
		f(&p)
		return encodePlacement(&p)
	}
	bad := map[string][]byte{
		"empty":                  nil,
		"the log version's":      append([]byte{2}, b[1:]...),
		"truncated":              b[:len(b)-3],
		"trailing bytes":         append(slices.Clone(b), 0),
		"no server":              ok(func(p *placement) { p.server = "" }),
		"no capacity":            ok(func(p *placement) { p.capacity = 0 }),
		"no time":                ok(func(p *placement) { p.at = 0 }),
		"a time beyond stamps":   ok(func(p *placement) { p.at = maxMicros + 1 }),
		"a position too far":     ok(func(p *placement) { p.first = maxPosition + 1 }),
		"no hashes":              ok(func(p *placement) { p.hashes = nil }),
		"too many hashes":        ok(func(p *placement) { p.hashes = make([]blockHash, maxHashesPerMessage+1) }),
		"a server name too long": ok(func(p *placement) { p.server = string(make([]byte, maxServerIDBytes+1)) }),
	}
	for name, b := range bad {
		if err := parsePlacement(&out, b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParsePlacement: any bytes either fail to parse or parse into a placement that,
// encoded again, parses the same; nothing panics, and what parses is within the
// bounds.
func FuzzParsePlacement(f *testing.F) {
	f.Add(encodePlacement(&placement{server: "llm/vllm-0", capacity: 256, at: 5, first: 2, hashes: hs(1, 2)}))
	f.Add([]byte{3, 1, 'x', 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p placement
		if err := parsePlacement(&p, b); err != nil {
			return
		}
		if len(p.hashes) > maxHashesPerMessage || p.at > maxMicros || p.first > maxPosition || p.capacity > maxCapacity {
			t.Fatalf("a placement over the bounds parsed: %d hashes, at %d, first %d, capacity %d", len(p.hashes), p.at, p.first, p.capacity)
		}
		var q placement
		if err := parsePlacement(&q, encodePlacement(&p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoded %+v parses as %+v (%v)", p, q, err)
		}
	})
}

// TestAPlacementOverOtherPromptsHoldsTogether: a peer that merges a replica's
// placements mixed with a salt (PlacementOverOtherPrompts) holds the salted blocks
// of what the replica holds, with the same stamps, and none of the replica's own:
// they are new blocks to an index, as other prompts' would be.
func TestAPlacementOverOtherPromptsHoldsTogether(t *testing.T) {
	const salt = 0x5eed
	x, y := newIndex(), newIndex()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, o := range workloadOf(rng, 1000, 30, []string{"ns/a"}) {
		x.apply(o.server, 200, o.at, 0, o.hashes)
		msg, err := PlacementOverOtherPrompts(encodePlacement(&placement{server: o.server, capacity: 200, at: o.at, hashes: o.hashes}), salt)
		if err != nil {
			t.Fatal(err)
		}
		var p placement
		if err := parsePlacement(&p, msg); err != nil {
			t.Fatal(err)
		}
		y.apply(p.server, 200, p.at, p.first, p.hashes)
	}
	want := map[blockHash]stamp{}
	for h, s := range contents(x, "ns/a") {
		want[h^salt] = s
	}
	if got := contents(y, "ns/a"); !maps.Equal(got, want) {
		t.Fatalf("the peer holds %d blocks, not the salted %d of the replica", len(got), len(want))
	}
	if got := matches(y, conversation(1, 5)); len(got) != 0 {
		t.Fatalf("the peer matches the replica's own prompt: %v", got)
	}
	if _, err := PlacementOverOtherPrompts([]byte{9}, salt); err == nil {
		t.Fatal("a malformed placement salted")
	}
}
