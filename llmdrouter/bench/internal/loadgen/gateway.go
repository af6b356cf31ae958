package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
)

// Replica is an EPP replica the gateway may send requests to.
type Replica struct {
	// Name identifies it in the records (its pod's name, say).
	Name   string
	Client *extproc.Client
}

// Gateway is the list of EPP replicas the gateway sends requests to, as Envoy's
// list of the EPP Service's ready endpoints: a replica is added once it is ready,
// and removed once it is terminating (no new request goes to it; those it routes
// go on to their end). It counts each replica's requests in flight, so that a
// replica can be stopped once it has none (Drain). Safe for concurrent use.
type Gateway struct {
	mu       sync.Mutex
	replicas []Replica
	inFlight map[string]int
	held     map[string]chan struct{}
	idle     *sync.Cond
}

// NewGateway lists replicas.
func NewGateway(replicas ...Replica) *Gateway {
	g := &Gateway{replicas: slices.Clone(replicas), inFlight: map[string]int{}, held: map[string]chan struct{}{}}
	g.idle = sync.NewCond(&g.mu)
	return g
}

// Add lists r: new requests may go to it.
func (g *Gateway) Add(r Replica) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.replicas = append(g.replicas, r)
}

// Remove unlists the replica named name: no new request goes to it.
func (g *Gateway) Remove(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.replicas = slices.DeleteFunc(g.replicas, func(r Replica) bool { return r.Name == name })
}

// Hold makes the requests sent to the replica named name wait, listed and in
// flight, until release is called: what a replica whose process is frozen does to
// the traffic (the gateway's requests queue on its connection), while the replica
// itself runs on.
func (g *Gateway) Hold(name string) (release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.held[name] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.held[name] == ch {
				delete(g.held, name)
			}
			close(ch)
		})
	}
}

// wait returns once the replica named name is not held (Hold), or ctx ends.
func (g *Gateway) wait(ctx context.Context, name string) error {
	g.mu.Lock()
	ch := g.held[name]
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drain waits until the replica named name, unlisted, has no request in flight
// (routed through it and not yet answered through it), at most timeout.
func (g *Gateway) Drain(name string, timeout time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.ContainsFunc(g.replicas, func(r Replica) bool { return r.Name == name }) {
		return fmt.Errorf("loadgen: draining replica %s, which the gateway still lists", name)
	}
	expired := false
	timer := time.AfterFunc(timeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		expired = true
		g.idle.Broadcast()
	})
	defer timer.Stop()
	for g.inFlight[name] > 0 {
		if expired {
			return fmt.Errorf("loadgen: replica %s still has %d requests in flight after %v", name, g.inFlight[name], timeout)
		}
		g.idle.Wait()
	}
	return nil
}

// pickOther is as pick among the replicas listed now but the one named not.
func (g *Gateway) pickOther(choice uint64, not string) (Replica, func(), error) {
	g.mu.Lock()
	others := slices.DeleteFunc(slices.Clone(g.replicas), func(r Replica) bool { return r.Name == not })
	g.mu.Unlock()
	if len(others) == 0 {
		return Replica{}, nil, errors.New("the gateway lists no other EPP replica")
	}
	return g.pickName(others[choice%uint64(len(others))].Name)
}

// pickName counts the replica named name in flight, if it is still listed.
func (g *Gateway) pickName(name string) (Replica, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.IndexFunc(g.replicas, func(r Replica) bool { return r.Name == name })
	if i < 0 {
		return Replica{}, nil, fmt.Errorf("the replica %s is no longer listed", name)
	}
	r := g.replicas[i]
	g.inFlight[r.Name]++
	return r, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inFlight[r.Name]--; g.inFlight[r.Name] == 0 {
			delete(g.inFlight, r.Name)
			g.idle.Broadcast()
		}
	}, nil
}

// pick is the replica choice picks among those listed now (choice modulo their
// number), counted in flight until release is called.
func (g *Gateway) pick(choice uint64) (Replica, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.replicas) == 0 {
		return Replica{}, nil, errors.New("the gateway lists no EPP replica")
	}
	r := g.replicas[choice%uint64(len(g.replicas))]
	g.inFlight[r.Name]++
	return r, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inFlight[r.Name]--; g.inFlight[r.Name] == 0 {
			delete(g.inFlight, r.Name)
			g.idle.Broadcast()
		}
	}, nil
}
