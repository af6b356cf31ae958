package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/standin"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// echoPeers stand in for the N-1 peers of one real replica of a fleet whose every
// replica routes as much as it does (the capacity bench's shared-index-loaded
// configurations). Each is a peer-syncer of its own (its own address, identity,
// listener and clock, listed in the EPP Service's EndpointSlices as a replica)
// whose only member is the real replica, with the shared prefix index's
// broadcast: it publishes again every placement the real replica publishes, over
// prompts of its own (sharedprefix.PlacementOverOtherPrompts: each block hash
// mixed with the peer's salt), after a delay of its own (up to a window: its
// requests come when they come, not when the real replica's do), and its windows
// fall on the grid of its own clock (echoOptions.clockOffset: nodes' clocks
// differ, so the peers' frames do not all arrive at one instant). It pushes, every
// interval, the in-flight load the real replica pushes, as its own (a replica at
// the same rate has the same load). So the real replica receives N-1 placements
// for each request it routes, in frames of the sizes of real ones, with blocks new
// to its index, and N-1 pushes of state an interval, as a replica of N replicas at
// its rate does, and sends each of its own to N-1 peers. Its CPU per request is
// then the fleet's CPU per request, at a rate per replica that 2 cores cannot
// give N real replicas. What the peers do not do: hold an index, so they answer
// no anti-entropy exchange (the real replica's opens time out; DECISIONS).
type echoPeers struct {
	broadcasts []*peersync.Broadcast
	syncers    []*peersync.Syncer
	offsets    []time.Duration
	stop       func()
}

// echoOptions are how the emulated peers differ from one another.
type echoOptions struct {
	// clockOffset: each peer's clock is this machine's plus an offset drawn
	// evenly from [-clockOffset, clockOffset].
	clockOffset time.Duration
	// seed draws the offsets and the delays.
	seed uint64
}

// startEchoPeers starts reps (the emulated replicas) as peers of measured, in
// namespace ns, with the EPP's broadcast of the shared index (plugin).
func startEchoPeers(ns string, measured *eppreplica.Replica, reps []*eppreplica.Replica, plugin string, o echoOptions) (*echoPeers, error) {
	target := peers.PeerMetadata{Namespace: ns, Name: measured.Pod, Address: measured.IP, Port: measured.SyncPort, Ready: true, Serving: true}
	interval, err := time.ParseDuration(syncInterval)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &echoPeers{}
	var running sync.WaitGroup
	e.stop = func() {
		cancel()
		running.Wait()
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x6563686f)) //nolint:gosec // a bench's draws
	for i, r := range reps {
		salt := uint64(i+1) * 0x9e3779b97f4a7c15 // this peer's prompts
		offset := time.Duration((2*rng.Float64() - 1) * float64(o.clockOffset))
		delays := rand.New(rand.NewPCG(rng.Uint64(), uint64(i))) //nolint:gosec // a bench's draws
		var delayMu sync.Mutex
		s, err := standin.Peer(ns, r.Pod, r.IP, int(r.SyncPort), target, interval, offset)
		if err != nil {
			e.stop()
			return nil, fmt.Errorf("emulated peer: %w", err)
		}
		var b *peersync.Broadcast
		b, err = s.Broadcast(sharedprefix.BroadcastName(plugin), peersync.BroadcastOptions{
			Window: sharedprefix.DefaultWindow,
			ReceiveMessage: func(m peersync.Message) error {
				if m.Kind != peersync.Live {
					return nil
				}
				msg, err := sharedprefix.PlacementOverOtherPrompts(m.Data, salt)
				if err != nil {
					return err
				}
				delayMu.Lock()
				delay := time.Duration(delays.Int64N(int64(sharedprefix.DefaultWindow)))
				delayMu.Unlock()
				time.AfterFunc(delay, func() { b.Publish(msg) })
				return nil
			},
		})
		if err != nil {
			e.stop()
			return nil, fmt.Errorf("emulated peer %s: %w", r.Pod, err)
		}
		e.broadcasts, e.syncers, e.offsets = append(e.broadcasts, b), append(e.syncers, s), append(e.offsets, offset)
		running.Go(func() { _ = s.Run(ctx) })
		running.Go(func() { pushLoad(ctx, s, interval) })
	}
	return e, nil
}

// inflightKeys are the state keys of upstream's in-flight load producer
// ("inflight:" and its name), whose values are *attrconcurrency.InFlightLoad.
const inflightKeys = "inflight:"

// pushLoad sets, every interval until ctx ends, peer s's in-flight load of each
// endpoint to the one its only member, the real replica, pushed last: s pushes
// as much state, as often, as the real replica does. Until s has set a key, it
// cannot decode the real replica's values of it (peersync decodes as the type of
// this replica's own), so it sets an empty load first.
func pushLoad(ctx context.Context, s *peersync.Syncer, interval time.Duration) {
	theirs := func(vals []any) any { return vals[len(vals)-1] } // after this peer's own
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, k := range s.Document(inflightKeys, "").Keys {
			for _, ep := range k.Endpoints {
				v, ok := s.Get(k.Key, ep.Endpoint, theirs)
				load, isLoad := v.(*attrconcurrency.InFlightLoad)
				if !ok || !isLoad {
					load = &attrconcurrency.InFlightLoad{}
				}
				_ = s.Set(k.Key, ep.Endpoint, load)
			}
		}
	}
}

// echoed is what the emulated peers published again, all together.
func (e *echoPeers) echoed() uint64 {
	var n uint64
	for _, b := range e.broadcasts {
		sent, _ := b.Stats()
		n += sent
	}
	return n
}

// check fails unless the real replica p (of a fleet of n) merged what its n-1
// emulated peers should have sent: n-1 placements for each one it made.
func (e *echoPeers) check(p *eppProc, n int) error {
	m, err := scrapeMetrics(p.Metrics)
	if err != nil {
		return err
	}
	own, want := m.merged["local"], float64(n-1)*m.merged["local"]
	if own == 0 || m.reached() < 0.95*want {
		return fmt.Errorf("the emulated peers fell short: the real replica made %.0f placements and merged %.0f of its peers' (want %.0f; the peers published %d)", own, m.reached(), want, e.echoed())
	}
	if pushed, held := e.loads(); pushed < held {
		return fmt.Errorf("the emulated peers fell short: they push %d in-flight values and hold %d of the real replica's", pushed, held)
	}
	return nil
}

// loads are the in-flight values the emulated peers hold, all together: their own
// (pushed) and the real replica's (held).
func (e *echoPeers) loads() (pushed, held int) {
	for _, s := range e.syncers {
		for _, k := range s.Document(inflightKeys, "").Keys {
			for _, ep := range k.Endpoints {
				for _, v := range ep.Values {
					if v.Replica == "self" {
						pushed++
					} else {
						held++
					}
				}
			}
		}
	}
	return pushed, held
}
