package modelsim

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// A fleet whose servers are idle samples no usage and no waiting; one whose
// server holds a request waiting for cache room samples both: what the routing
// bench reports to show its servers were near saturation.
func TestFleetSamplesUsageAndWaiting(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 10
	ls, err := Listen("127.0.0.1", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	f, err := StartFleet(cfg, NewClock(20), ls, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop() })

	time.Sleep(20 * time.Millisecond)
	if idle := f.TakeBalance(); idle.Samples == 0 || idle.Usage() != 0 || idle.WaitingShare() != 0 {
		t.Fatalf("idle fleet: %d samples, usage %v, waiting share %v; want samples, no usage, no waiting", idle.Samples, idle.Usage(), idle.WaitingShare())
	}
	var wg sync.WaitGroup
	for i := range 2 {
		// 7 blocks each in a cache of 10: the second waits for the first.
		wg.Go(func() { submit(t, f.Servers[0], completion(strings.Repeat(string(rune('a'+i)), 4*6*64), 64)) })
	}
	wg.Wait()
	b := f.TakeBalance()
	if b.WaitingShare() <= 0 || b.WaitingShare() >= 1 {
		t.Errorf("one server of 2 held a request waiting for part of the time: waiting share %v, want between 0 and 1", b.WaitingShare())
	}
	if b.Usage() <= 0 || b.Usage() > 0.5 {
		t.Errorf("one server of 2 at most 7/10 full: mean usage %v, want above 0 and at most 0.5", b.Usage())
	}
}
