package reachability_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// A Go EPP that holds the peer set in a MemoryPeerStore probes its peers with a
// Prober and asks it, per peer, whether the last connection succeeded. Probing never
// changes the store. (Here the peers are on 127.0.0.1: one listens, one does not.)
func ExampleProber() {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		for {
			conn, err := up.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	down.Close() // nothing listens there any more
	port := func(l net.Listener) int32 {
		_, p, _ := net.SplitHostPort(l.Addr().String())
		n, _ := strconv.Atoi(p)
		return int32(n)
	}

	store := peers.NewMemoryPeerStore()
	store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-1", Address: "127.0.0.1", Port: port(up)})
	store.UpsertPeer(peers.PeerMetadata{Namespace: "ns", Name: "epp-2", Address: "127.0.0.1", Port: port(down)})

	prober, err := reachability.New(reachability.Options{Interval: 100 * time.Millisecond}, logr.Discard())
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _ = prober.Run(ctx, store) }()

	// Wait until both peers were probed once: Generation's channel is closed when a
	// peer's reachability changes (its first probe included).
	for {
		_, changed := prober.Generation()
		a, _ := prober.Status("ns/epp-1")
		b, _ := prober.Status("ns/epp-2")
		if a.Probed && b.Probed {
			fmt.Println("ns/epp-1 reachable:", a.Reachable)
			fmt.Println("ns/epp-2 reachable:", b.Reachable, b.Error)
			fmt.Println("peers in the store:", len(store.Peers()))
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
	// Output:
	// ns/epp-1 reachable: true
	// ns/epp-2 reachable: false refused
	// peers in the store: 2
}
