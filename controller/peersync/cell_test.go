package peersync

import (
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// TestCellReadsAreNeverTorn: a writer stores values whose two fields are always
// equal, of two lengths (inline and not) and two generations, while readers read;
// no reader ever sees a value whose fields differ, or a value of the generation it
// did not ask for.
func TestCellReadsAreNeverTorn(t *testing.T) {
	type pair struct {
		A, B  int64
		Label string
	}
	c := wire.CodecFor(reflect.TypeOf(&pair{}))
	key := &wire.RemoteKey{Name: "k", Kind: c.Kind, Fields: c.Fields}
	cells := newCells(1)
	cell := &cells[0]
	const rounds = 20000
	long := string(make([]byte, 40)) // over the inline words
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range int64(rounds) {
			label := ""
			if i%3 == 0 {
				label = long
			}
			raw, _ := c.Encode(nil, &pair{A: i, B: i, Label: label})
			gen := uint64(1 + i%2)
			cell.write(gen, key, raw, i)
			if i%7 == 0 {
				cell.clear()
			}
		}
	}()
	var bad sync.Map
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for _, gen := range []uint64{1, 2} {
					v, _, ok := cell.read(gen, c)
					if !ok {
						continue
					}
					p := v.(*pair)
					if p.A != p.B || (p.Label != "" && p.Label != long) || uint64(1+p.A%2) != gen {
						bad.Store(*p, gen)
					}
				}
			}
		}()
	}
	wg.Wait()
	bad.Range(func(k, v any) bool {
		t.Errorf("read %+v as generation %v: a torn or mislabelled value", k, v)
		return true
	})
}

// TestCellIsOneCacheLine: a slot's cells for all peers lie side by side, one cache
// line each (a Get reads one per peer).
func TestCellIsOneCacheLine(t *testing.T) {
	if s := unsafe.Sizeof(cell{}); s != 64 {
		t.Fatalf("a cell is %d bytes, want 64", s)
	}
}
