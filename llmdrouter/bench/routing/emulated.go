package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/standin"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// echoPeers stand in for the N-1 peers of one real replica of a fleet whose every
// replica routes as much as it does (the capacity bench's shared-index-loaded
// configuration). Each is a peer-syncer of its own (its own address, identity and
// listener, listed in the EPP Service's EndpointSlices as a replica) whose only
// member is the real replica, with the shared prefix index's broadcast: it
// publishes again every placement the real replica publishes, at once, over
// prompts of its own (sharedprefix.PlacementOverOtherPrompts: each block hash
// mixed with the peer's salt). So the real replica receives N-1 placements for
// each request it routes, in frames on the same grid as a peer's, of the sizes of
// real ones and with blocks new to its index (as N-1 peers routing other
// conversations send), as a replica of N replicas at its rate does, and sends
// each of its own to N-1 peers. Its CPU per request is then the fleet's CPU per
// request, at a rate per replica that 2 cores cannot give N real replicas.
type echoPeers struct {
	broadcasts []*peersync.Broadcast
	stop       func()
}

// startEchoPeers starts reps (the emulated replicas) as peers of measured, in
// namespace ns, with the EPP's broadcast of the shared index (plugin).
func startEchoPeers(ns string, measured *eppreplica.Replica, reps []*eppreplica.Replica, plugin string) (*echoPeers, error) {
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
	for i, r := range reps {
		salt := uint64(i+1) * 0x9e3779b97f4a7c15 // this peer's prompts
		s, err := standin.Peer(ns, r.Pod, r.IP, int(r.SyncPort), target, interval)
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
				b.Publish(msg)
				return nil
			},
		})
		if err != nil {
			e.stop()
			return nil, fmt.Errorf("emulated peer %s: %w", r.Pod, err)
		}
		e.broadcasts = append(e.broadcasts, b)
		running.Go(func() { _ = s.Run(ctx) })
	}
	return e, nil
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
	return nil
}
