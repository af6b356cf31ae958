package discovery

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// PeerDiscovery runs one Source inside a host program, in the plugin shape of
// llm-d-router's EPP (datalayer.PeerDiscovery): Start with the host's notifier, and
// Ready. Nothing else is needed: a source that talks to Kubernetes loads its own
// client configuration. The source publishes into a store of its own, from which
// Start delivers to the notifier; Peers reads that store.
type PeerDiscovery struct {
	source  Source
	store   *peers.MemoryPeerStore
	pub     *Publisher
	ready   chan struct{}
	started atomic.Bool
}

// NewPeerDiscovery builds a source with build, giving it a Publisher (for the source
// named source, with opts) that feeds the PeerDiscovery's own store. Without
// opts.Instance, the discovery's metrics are labelled with a name no other
// discovery of the process has: the source's name for the first one, then
// "<source>-2", "<source>-3", ... (metrics.NewInstance).
func NewPeerDiscovery(source string, log logr.Logger, opts PublisherOptions, build func(*Publisher) (Source, error)) (*PeerDiscovery, error) {
	if opts.Instance == "" {
		opts.Instance = metrics.NewInstance(source)
	}
	store := peers.NewMemoryPeerStore()
	pub := NewPublisher(source, store, log, opts)
	src, err := build(pub)
	if err != nil {
		return nil, err
	}
	return &PeerDiscovery{source: src, store: store, pub: pub, ready: make(chan struct{})}, nil
}

// Start runs the source and sends n the initial peer set and then every change,
// until ctx ends (then it returns nil) or the source fails. Every call to n is made
// from the goroutine that called Start, in order: n need not be safe for concurrent
// use. A notifier slower than the changes receives the net change since its last
// call. Ready closes once n holds the initial set. Start may be called once.
func (d *PeerDiscovery) Start(ctx context.Context, n peers.PeerNotifier) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("peer discovery: Start called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := d.source.Run(ctx)
		cancel() // a failed source ends the delivery too
		done <- err
	}()
	select {
	case <-ctx.Done():
	case <-d.pub.Ready():
		initial := d.store.Snapshot()
		peers.Diff(nil, initial.Peers).Apply(n)
		close(d.ready)
		d.store.FollowFrom(ctx, n, initial)
	}
	if err := <-done; err != nil {
		return fmt.Errorf("peer discovery (%s): %w", d.pub.Name(), err)
	}
	return nil
}

// Ready is closed once the notifier given to Start holds the source's initial set
// (the result of its initial reconciliation).
func (d *PeerDiscovery) Ready() <-chan struct{} { return d.ready }

// SelfListed reports whether the source lists this replica itself as a member, and
// a channel closed when that may have changed (Publisher.SelfListed).
func (d *PeerDiscovery) SelfListed() (bool, <-chan struct{}) { return d.pub.SelfListed() }

// Peers reads the published peer set, besides the notifier.
func (d *PeerDiscovery) Peers() peers.Reader { return d.store }

// Publisher is the source's Publisher: its status (synced, stale, the last
// error), generation and metrics.
func (d *PeerDiscovery) Publisher() *Publisher { return d.pub }

// Status is the source's status: synced, and the last error.
func (d *PeerDiscovery) Status() Status { return d.pub }
