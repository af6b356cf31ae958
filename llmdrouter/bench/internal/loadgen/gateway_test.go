package loadgen

import (
	"context"
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

// TestGatewayHoldsAReplicasRequests: while a replica is held, a request sent to it
// waits (as on a frozen replica's connection) and the others' do not; released,
// it goes on; a request whose deadline passes while held fails.
func TestGatewayHoldsAReplicasRequests(t *testing.T) {
	g := NewGateway(Replica{Name: "a"}, Replica{Name: "b"})
	release := g.Hold("b")
	if err := g.wait(context.Background(), "a"); err != nil {
		t.Fatalf("a request to a, not held: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- g.wait(context.Background(), "b") }()
	select {
	case err := <-waited:
		t.Fatalf("a request to the held replica went on (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx, "b"); err == nil {
		t.Error("a request held past its deadline did not fail")
	}
	release()
	release() // twice is once
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("released: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request to a released replica still waits")
	}
	if err := g.wait(context.Background(), "b"); err != nil {
		t.Errorf("after the release: %v", err)
	}
}
