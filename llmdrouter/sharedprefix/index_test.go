package sharedprefix

import (
	"encoding/binary"
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

// order is a server's blocks, the most recent first.
func order(x *index, server string) []blockHash {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []blockHash
	if s := x.servers[server]; s != nil {
		s.newestFirst(func(h, _ blockHash) bool { out = append(out, h); return true })
	}
	return out
}

// TestIndexRouteSaysWhatIsNewAndWhatIsTouched: a decision's ops for the peers are
// the runs of blocks new to the server (with the parent of the first) and of
// blocks it held (one touch of their chain: its last block and length); a
// repeated decision is one touch.
func TestIndexRouteSaysWhatIsNewAndWhatIsTouched(t *testing.T) {
	x := newIndex()
	if got, want := x.route("ns/a", 10, hs(1, 2, 3)), []op{{kind: opAdd, ref: 0, hashes: hs(1, 2, 3)}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first placement: %+v, want %+v", got, want)
	}
	if got, want := x.route("ns/a", 10, hs(1, 2, 3, 4, 5)), []op{{kind: opTouch, ref: 3, n: 3}, {kind: opAdd, ref: 3, hashes: hs(4, 5)}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the next turn: %+v, want %+v", got, want)
	}
	if got, want := x.route("ns/a", 10, hs(1, 2, 3)), []op{{kind: opTouch, ref: 3, n: 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a repeated decision: %+v, want %+v", got, want)
	}
	if got := order(x, "ns/a"); !slices.Equal(got, hs(3, 2, 1, 5, 4)) {
		t.Fatalf("recency %v, want the repeated chain first, its last block most recent", got)
	}
	if x.entries() != 5 {
		t.Fatalf("entries %d, want 5", x.entries())
	}
}

// TestIndexEvictsTheLeastRecent: each server's LRU holds its capacity in blocks; a
// block touched again is kept over one that was not; an evicted block is no longer
// matched on that server; a smaller capacity (this replica's, from the server's
// metrics) shrinks it.
func TestIndexEvictsTheLeastRecent(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 3, hs(1, 2, 3))
	x.route("ns/a", 3, hs(1)) // 1 is the most recent now
	x.route("ns/a", 3, hs(4)) // evicts 2
	if got := matches(x, hs(2)); len(got) != 0 {
		t.Fatalf("block 2, evicted, still matched: %v", got)
	}
	for _, h := range []uint64{1, 3, 4} {
		if got := matches(x, hs(h)); got["ns/a"] != 1 {
			t.Fatalf("block %d not matched after the eviction of 2: %v", h, got)
		}
	}
	if x.entries() != 3 {
		t.Fatalf("entries %d, want the capacity 3", x.entries())
	}
	x.route("ns/a", 2, hs(4))
	if x.entries() != 2 || len(matches(x, hs(3))) != 0 {
		t.Fatalf("after a resize to 2: entries %d, block 3 %v", x.entries(), matches(x, hs(3)))
	}
}

// TestIndexMatchesAsUpstream: walking the request's hashes in order, every server
// that holds a hash counts one, until a hash that no server holds.
func TestIndexMatchesAsUpstream(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 10, hs(1, 2, 3))
	x.route("ns/b", 10, hs(1, 9))
	got := matches(x, hs(1, 2, 3, 4, 9))
	if want := map[string]int{"ns/a": 3, "ns/b": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("match %v, want %v (stop at 4, which no server holds)", got, want)
	}
	if got := matches(x, hs(5, 1)); len(got) != 0 {
		t.Fatalf("a first block nobody holds: %v", got)
	}
}

// conversation is n blocks of a chain that starts from seed.
func conversation(seed uint64, n int) []blockHash {
	out := make([]blockHash, n)
	h := seed * 0x9e3779b97f4a7c15
	for i := range out {
		h = h*6364136223846793005 + 1442695040888963407
		out[i] = blockHash(h | 1)
	}
	return out
}

// TestAPeerThatAppliesTheOpsHoldsTheSame: a replica that applies another's ops,
// decision by decision, holds the same blocks in the same order (so it evicts the
// same ones), with the same digest: recency is shared, not only the blocks.
func TestAPeerThatAppliesTheOpsHoldsTheSame(t *testing.T) {
	x, y := newIndex(), newIndex()
	rng := rand.New(rand.NewPCG(1, 2))
	convs := make([][]blockHash, 40)
	for i := range convs {
		convs[i] = conversation(uint64(i), 5+rng.IntN(40))
	}
	for range 2000 {
		c := convs[rng.IntN(len(convs))]
		server := []string{"ns/a", "ns/b", "ns/c"}[rng.IntN(3)]
		n := 1 + rng.IntN(len(c))
		ops := x.route(server, 300, c[:n])
		y.apply(server, 300, ops)
	}
	for _, s := range []string{"ns/a", "ns/b", "ns/c"} {
		if a, b := order(x, s), order(y, s); !slices.Equal(a, b) {
			t.Fatalf("%s: the peer holds %d blocks in another order than the replica's %d", s, len(b), len(a))
		}
	}
	if a, b := digestOf(x.serverStates()), digestOf(y.serverStates()); a != b || a == 0 {
		t.Fatalf("digests %x and %x", a, b)
	}
}

// TestASnapshotNeverEvictsNewerBlocks: a snapshot's blocks are added as older than
// what the replica holds: into the room left, in the snapshot's order, never
// evicting a block placed meanwhile; a block held already stays where it is.
func TestASnapshotNeverEvictsNewerBlocks(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 4, hs(10, 11, 12, 13)) // the peer's index: 13 most recent
	y := newIndex()
	y.route("ns/a", 4, hs(20, 21)) // live placements, before the snapshot
	x.each(func(server string, capacity int, pairs []blockHash) bool {
		y.apply(server, 4, []op{{kind: opOlder, hashes: pairs}})
		return true
	})
	if got := order(y, "ns/a"); !slices.Equal(got, hs(21, 20, 13, 12)) {
		t.Fatalf("after the snapshot: %v, want the live blocks first, then the snapshot's most recent ones in its order", got)
	}
	// A snapshot block held already is not moved.
	z := newIndex()
	z.route("ns/a", 4, hs(12))
	x.each(func(server string, capacity int, pairs []blockHash) bool {
		z.apply(server, 4, []op{{kind: opOlder, hashes: pairs}})
		return true
	})
	if got := order(z, "ns/a"); !slices.Equal(got, hs(12, 13, 11, 10)) {
		t.Fatalf("after the snapshot: %v, want 12 first (held, live), then the rest", got)
	}
}

// TestDigestsAgreeOnTheSameBlocks: the digest depends on the blocks each server
// holds, not on their order or how they came.
func TestDigestsAgreeOnTheSameBlocks(t *testing.T) {
	x, y := newIndex(), newIndex()
	x.route("ns/a", 10, hs(1, 2, 3))
	x.route("ns/b", 10, hs(4))
	y.route("ns/b", 10, hs(4))
	y.route("ns/a", 10, hs(3, 1))
	if digestOf(x.serverStates()) == digestOf(y.serverStates()) {
		t.Fatal("digests agree on different blocks")
	}
	y.route("ns/a", 10, hs(2))
	if digestOf(x.serverStates()) != digestOf(y.serverStates()) {
		t.Fatal("digests differ on the same blocks in another order")
	}
	y.route("ns/c", 10, hs(2))
	if digestOf(x.serverStates()) == digestOf(y.serverStates()) {
		t.Fatal("digests agree with a server more")
	}
}

// TestIndexRemovesAServer: a server that left the pool takes its blocks along;
// blocks another server holds stay.
func TestIndexRemovesAServer(t *testing.T) {
	x := newIndex()
	x.route("ns/a", 4, hs(1, 2, 3, 4))
	x.route("ns/b", 4, hs(1, 8))
	x.removeServer("ns/a")
	if got := matches(x, hs(1, 8)); !reflect.DeepEqual(got, map[string]int{"ns/b": 2}) || x.entries() != 2 {
		t.Fatalf("after removing ns/a: match %v, entries %d", got, x.entries())
	}
}

// TestMemoryPerBlock: the index's cost per block, which bounds its memory
// (servers × capacity × this). Upstream's LRU, which it used before, took about
// 426 bytes a block.
func TestMemoryPerBlock(t *testing.T) {
	const servers, perServer = 8, 25000
	before := heap()
	x := newIndex()
	for s := range servers {
		name := []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f", "ns/g", "ns/h"}[s]
		for c := range perServer / 100 {
			x.route(name, perServer, conversation(uint64(s*100000+c), 100))
		}
	}
	per := float64(heap()-before) / float64(x.entries())
	t.Logf("%d blocks: %.0f bytes a block", x.entries(), per)
	if x.entries() != servers*perServer {
		t.Fatalf("%d blocks, want %d", x.entries(), servers*perServer)
	}
	if per > 200 {
		t.Errorf("%.0f bytes a block, want under 200", per)
	}
	runtime.KeepAlive(x)
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestPlacementRoundTripAndBounds: a placement decodes to what was encoded, about 8
// bytes a new block and 10 a touch; version 1 is still read; what breaks a bound is
// refused.
func TestPlacementRoundTripAndBounds(t *testing.T) {
	in := placement{server: "llm/vllm-3-rank-0", capacity: 31250, at: 1_700_000_000_000_000, ops: []op{
		{kind: opTouch, ref: 7, n: 12}, {kind: opAdd, ref: 7, hashes: hs(1, 1<<63, 42)}, {kind: opOlder, hashes: hs(5, 4, 4, 3)}}}
	b := encodePlacement(&in)
	var out placement
	if err := parsePlacement(&out, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	size := func(ops ...op) int {
		return len(encodePlacement(&placement{server: in.server, capacity: 1, at: in.at, ops: ops}))
	}
	if per := float64(size(op{kind: opAdd, hashes: make([]blockHash, 100)})-size(op{kind: opAdd, hashes: make([]blockHash, 1)})) / 99; per != 8 {
		t.Errorf("%v bytes a new block, want 8", per)
	}
	// Version 1: a server, a capacity, a time and the new hashes.
	v1 := []byte{placementVersion1, 1, 'x', 9, 5, 2}
	v1 = binary.LittleEndian.AppendUint64(v1, 11)
	v1 = binary.LittleEndian.AppendUint64(v1, 12)
	if err := parsePlacement(&out, v1); err != nil || out.server != "x" || out.at != 5 || !reflect.DeepEqual(out.ops, []op{{kind: opAdd, hashes: hs(11, 12)}}) {
		t.Fatalf("version 1: %+v %v", out, err)
	}
	bad := map[string][]byte{
		"empty":           nil,
		"another version": append([]byte{3}, b[1:]...),
		"truncated":       b[:len(b)-3],
		"trailing bytes":  append(slices.Clone(b), 0),
		"no server":       encodePlacement(&placement{capacity: 1, at: 1, ops: []op{{kind: opAdd, hashes: hs(1)}}}),
		"no capacity":     encodePlacement(&placement{server: "x", at: 1, ops: []op{{kind: opAdd, hashes: hs(1)}}}),
		"too many hashes": encodePlacement(&placement{server: "x", capacity: 1, at: 1, ops: []op{{kind: opAdd, hashes: make([]blockHash, maxHashesPerMessage+1)}}}),
		"too many touched": encodePlacement(&placement{server: "x", capacity: 1, at: 1, ops: []op{
			{kind: opTouch, ref: 1, n: maxTouchPerMessage}, {kind: opTouch, ref: 2, n: 1}}}),
		"an empty add":    encodePlacement(&placement{server: "x", capacity: 1, at: 1, ops: []op{{kind: opAdd}}}),
		"an unknown op":   append(encodePlacement(&placement{server: "x", capacity: 1, at: 1})[:5], 1, 9),
		"ops beyond data": binary.AppendUvarint(encodePlacement(&placement{server: "x", capacity: 1, at: 1})[:len(encodePlacement(&placement{server: "x", capacity: 1, at: 1}))-1], 5),
	}
	for name, b := range bad {
		if err := parsePlacement(&out, b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParsePlacement: any bytes either fail to parse or parse into a placement that,
// encoded again, parses the same (a varint may be written longer than it needs);
// nothing panics, and what parses is within the bounds.
func FuzzParsePlacement(f *testing.F) {
	f.Add(encodePlacement(&placement{server: "llm/vllm-0", capacity: 256, at: 5, ops: []op{{kind: opAdd, ref: 3, hashes: hs(1, 2)}, {kind: opTouch, ref: 2, n: 2}}}))
	f.Add(encodePlacement(&placement{server: "x", capacity: 1, ops: []op{{kind: opOlder, hashes: hs(1, 0)}}}))
	f.Add([]byte{1, 1, 'x', 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p placement
		if err := parsePlacement(&p, b); err != nil {
			return
		}
		if p.cost() > maxHashesPerMessage+maxTouchPerMessage || len(p.ops) > maxOpsPerMessage {
			t.Fatalf("a placement over the bounds parsed: cost %d, %d ops", p.cost(), len(p.ops))
		}
		var q placement
		if err := parsePlacement(&q, encodePlacement(&p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoded %+v parses as %+v (%v)", p, q, err)
		}
	})
}

// TestAPlacementOverOtherPromptsHoldsTogether: a peer that applies a replica's
// placements mixed with a salt (PlacementOverOtherPrompts) holds the salted blocks
// of what the replica holds, in the same order (its touches find the chains its
// adds made), and none of the replica's own: they are new blocks to an index, as
// other prompts' would be.
func TestAPlacementOverOtherPromptsHoldsTogether(t *testing.T) {
	const salt = 0x5eed
	x, y := newIndex(), newIndex()
	rng := rand.New(rand.NewPCG(3, 4))
	convs := make([][]blockHash, 30)
	for i := range convs {
		convs[i] = conversation(uint64(i), 5+rng.IntN(40))
	}
	touches := 0
	for range 1000 {
		c := convs[rng.IntN(len(convs))]
		ops := x.route("ns/a", 200, c[:1+rng.IntN(len(c))])
		for _, o := range ops {
			if o.kind == opTouch {
				touches++
			}
		}
		msg, err := PlacementOverOtherPrompts(encodePlacement(&placement{server: "ns/a", capacity: 200, at: 1, ops: ops}), salt)
		if err != nil {
			t.Fatal(err)
		}
		var p placement
		if err := parsePlacement(&p, msg); err != nil {
			t.Fatal(err)
		}
		y.apply(p.server, 200, p.ops)
	}
	want := order(x, "ns/a")
	for i := range want {
		want[i] ^= salt
	}
	if got := order(y, "ns/a"); touches == 0 || !slices.Equal(got, want) {
		t.Fatalf("the peer holds %d blocks, not the salted %d of the replica in its order (%d touches)", len(got), len(want), touches)
	}
	if got := matches(y, convs[0]); len(got) != 0 {
		t.Fatalf("the peer matches the replica's own prompt: %v", got)
	}
	if _, err := PlacementOverOtherPrompts([]byte{9}, salt); err == nil {
		t.Fatal("a malformed placement salted")
	}
}
