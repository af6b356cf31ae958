package peers_test

import (
	"context"
	"fmt"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// A consumer (say, the EPP's cross-replica syncer) follows the peer set with
// WaitForChange: it always gets the newest set, never a backlog of old ones.
func ExampleMemoryPeerStore() {
	store := peers.NewMemoryPeerStore()

	// A source publishes (usually through a discovery.Publisher).
	store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005, Ready: true, Serving: true})
	store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-2", Address: "fd00::3", Port: 9005, Ready: true, Serving: true})

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	snap, err := store.WaitForChange(ctx, 0) // 0: nothing handled yet
	if err != nil {
		return
	}
	for _, p := range snap.Peers {
		fmt.Println(p.ID(), p.HostPort())
	}
	fmt.Println("version", snap.Version)
	// Output:
	// ns/epp-1 10.0.0.2:9005
	// ns/epp-2 [fd00::3]:9005
	// version 2
}

// A notifier that is not safe for concurrent use gets every change from one
// goroutine, in order, with Follow.
func ExampleMemoryPeerStore_Follow() {
	store := peers.NewMemoryPeerStore()
	store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005})

	ctx, cancel := context.WithCancel(context.Background())
	n := &printer{done: cancel}
	store.Follow(ctx, n) // returns when ctx ends
	// Output:
	// upsert ns/epp-1 at 10.0.0.2:9005
}

type printer struct{ done func() }

func (p *printer) UpsertPeer(m peers.PeerMetadata) {
	fmt.Println("upsert", m.ID(), "at", m.HostPort())
	p.done()
}
func (p *printer) DeletePeer(id string) { fmt.Println("delete", id) }
