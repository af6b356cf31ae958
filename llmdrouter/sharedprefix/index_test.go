package sharedprefix

import (
	"encoding/binary"
	"reflect"
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

// TestIndexAddReportsWhatIsNew: the hashes a placement adds that the server's LRU did
// not hold are what goes to the peers; a repeated decision adds nothing new.
func TestIndexAddReportsWhatIsNew(t *testing.T) {
	x := newIndex()
	if got := x.add("ns/a", 10, hs(1, 2, 3), nil); !slices.Equal(got, hs(1, 2, 3)) {
		t.Fatalf("first placement: new %v", got)
	}
	if got := x.add("ns/a", 10, hs(1, 2, 3, 4, 5), nil); !slices.Equal(got, hs(4, 5)) {
		t.Fatalf("the next turn: new %v, want its two new blocks", got)
	}
	if got := x.add("ns/a", 10, hs(1, 2, 3), nil); len(got) != 0 {
		t.Fatalf("a repeated decision: new %v", got)
	}
	if got := x.add("ns/b", 10, hs(1, 2), nil); !slices.Equal(got, hs(1, 2)) {
		t.Fatalf("another server: new %v", got)
	}
	if x.entries() != 7 {
		t.Fatalf("entries %d, want 7", x.entries())
	}
}

// TestIndexEvictsTheLeastRecent: each server's LRU holds its capacity in blocks; a
// block touched again is kept over one that was not; an evicted block is no longer
// matched on that server.
func TestIndexEvictsTheLeastRecent(t *testing.T) {
	x := newIndex()
	x.add("ns/a", 3, hs(1, 2, 3), nil)
	x.add("ns/a", 3, hs(1), nil) // 1 is the most recent now
	x.add("ns/a", 3, hs(4), nil) // evicts 2
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
	// A smaller capacity (autoTune saw the server's) shrinks the LRU: 3, now the
	// least recent, goes.
	x.add("ns/a", 2, hs(4), nil)
	if x.entries() != 2 || len(matches(x, hs(3))) != 0 {
		t.Fatalf("after a resize to 2: entries %d, block 3 %v", x.entries(), matches(x, hs(3)))
	}
}

// TestIndexMatchesAsUpstream: walking the request's hashes in order, every server
// that holds a hash counts one, until a hash that no server holds.
func TestIndexMatchesAsUpstream(t *testing.T) {
	x := newIndex()
	x.add("ns/a", 10, hs(1, 2, 3), nil)
	x.add("ns/b", 10, hs(1, 9), nil)
	got := matches(x, hs(1, 2, 3, 4, 9))
	if want := map[string]int{"ns/a": 3, "ns/b": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("match %v, want %v (stop at 4, which no server holds)", got, want)
	}
	if got := matches(x, hs(5, 1)); len(got) != 0 {
		t.Fatalf("a first block nobody holds: %v", got)
	}
}

// TestIndexRemovesAServerAndRebuildsFromASnapshot: a server that left the pool
// takes its blocks along; what each yields, added in order to another index, is the
// same index, down to the order of eviction.
func TestIndexRemovesAServerAndRebuildsFromASnapshot(t *testing.T) {
	x := newIndex()
	x.add("ns/a", 4, hs(1, 2, 3, 4), nil)
	x.add("ns/a", 4, hs(1), nil)
	x.add("ns/b", 4, hs(7, 8), nil)
	y := newIndex()
	x.each(func(server string, capacity int, hashes []blockHash) bool {
		y.add(server, capacity, hashes, nil)
		return true
	})
	if !reflect.DeepEqual(x.counts(), y.counts()) {
		t.Fatalf("rebuilt %v, want %v", y.counts(), x.counts())
	}
	// One more block on a: 2 (now the least recent on both) goes.
	x.add("ns/a", 4, hs(5), nil)
	y.add("ns/a", 4, hs(5), nil)
	if len(matches(y, hs(2))) != 0 || len(matches(x, hs(2))) != 0 {
		t.Fatal("the rebuilt index does not evict as the original")
	}
	x.removeServer("ns/a")
	if got := matches(x, hs(1)); len(got) != 0 || x.entries() != 2 {
		t.Fatalf("after removing ns/a: match %v, entries %d", got, x.entries())
	}
}

// TestPlacementRoundTripAndBounds: a placement decodes to what was encoded, about 8
// bytes a block; what breaks a bound is refused.
func TestPlacementRoundTripAndBounds(t *testing.T) {
	in := placement{server: "llm/vllm-3-rank-0", capacity: 31250, at: 1_700_000_000_000_000, hashes: hs(1, 1<<63, 42)}
	b := appendPlacement(in)
	var out placement
	if err := parsePlacement(&out, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	if per := float64(len(appendPlacement(placement{server: in.server, capacity: 1, at: in.at, hashes: make([]blockHash, 100)}))-len(appendPlacement(placement{server: in.server, capacity: 1, at: in.at}))) / 100; per != 8 {
		t.Errorf("%v bytes a block, want 8", per)
	}
	bad := map[string][]byte{
		"empty":               nil,
		"another version":     append([]byte{2}, b[1:]...),
		"truncated":           b[:len(b)-3],
		"trailing bytes":      append(slices.Clone(b), 0),
		"no server":           appendPlacement(placement{capacity: 1, hashes: hs(1)}),
		"no capacity":         appendPlacement(placement{server: "x", hashes: hs(1)}),
		"too many hashes":     appendPlacement(placement{server: "x", capacity: 1, hashes: make([]blockHash, maxHashesPerMessage+1)}),
		"a count beyond data": binary.AppendUvarint(appendPlacement(placement{server: "x", capacity: 1})[:len(appendPlacement(placement{server: "x", capacity: 1}))-1], 5),
	}
	for name, b := range bad {
		if err := parsePlacement(&out, b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParsePlacement: any bytes either fail to parse or parse into a placement that,
// encoded again, parses the same (a varint may be written longer than it needs);
// nothing panics.
func FuzzParsePlacement(f *testing.F) {
	f.Add(appendPlacement(placement{server: "llm/vllm-0", capacity: 256, at: 5, hashes: hs(1, 2)}))
	f.Add(appendPlacement(placement{server: "x", capacity: 1}))
	f.Add([]byte{1, 1, 'x', 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p placement
		if err := parsePlacement(&p, b); err != nil {
			return
		}
		var q placement
		if err := parsePlacement(&q, appendPlacement(p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoded %+v parses as %+v (%v)", p, q, err)
		}
	})
}
