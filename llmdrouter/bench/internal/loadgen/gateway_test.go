package loadgen

import (
	"strings"
	"testing"
	"time"
)

// TestGatewayListsAndDrains: a request goes to a listed replica (the choice
// modulo their number); an unlisted replica gets no new request, and Drain returns
// once the requests it routes have ended, not before.
func TestGatewayListsAndDrains(t *testing.T) {
	g := NewGateway(Replica{Name: "a"}, Replica{Name: "b"})
	r, release, err := g.pick(3)
	if err != nil || r.Name != "b" {
		t.Fatalf("pick(3) of a, b = %q, %v; want b", r.Name, err)
	}
	g.Add(Replica{Name: "c"})
	g.Remove("b")
	for choice := range uint64(10) {
		r, rel, err := g.pick(choice)
		if err != nil || r.Name == "b" {
			t.Fatalf("pick(%d) after b left: %q, %v", choice, r.Name, err)
		}
		rel()
	}
	if err := g.Drain("a", time.Second); err == nil || !strings.Contains(err.Error(), "still lists") {
		t.Errorf("draining a listed replica: %v", err)
	}
	drained := make(chan error, 1)
	go func() { drained <- g.Drain("b", 10*time.Second) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while b still had a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-drained:
		if err != nil {
			t.Errorf("Drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return once b's request ended")
	}
	_, release, _ = g.pick(0)
	g.Remove("a")
	if err := g.Drain("a", 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "1 requests in flight") {
		t.Errorf("a drain that times out: %v", err)
	}
	release()
	g.Remove("c")
	if _, _, err := g.pick(0); err == nil {
		t.Error("a pick with no replica listed did not fail")
	}
}
