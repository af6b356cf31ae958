package peersync_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
)

// Two replicas of an EPP share how many requests each has in flight on a model
// server: each sets its own count, and Get folds it with every live peer's. Each
// replica's peer store lists the other, as its peer discovery would from the EPP
// Service's EndpointSlices (here both listen on 127.0.0.1).
func ExampleSyncer() {
	names := []string{"epp-a", "epp-b"}
	var stores []*peers.MemoryPeerStore
	var syncers []*peersync.Syncer
	var listed []peers.PeerMetadata
	for _, name := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		store := peers.NewMemoryPeerStore()
		s, err := peersync.New(peersync.Options{
			Self: peers.Self{Namespace: "ns", Name: name}, Peers: store, Listener: l,
			Interval: 50 * time.Millisecond, Instance: "example-" + name,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		stores, syncers = append(stores, store), append(syncers, s)
		listed = append(listed, peers.PeerMetadata{Namespace: "ns", Name: name, Address: "127.0.0.1",
			Port: int32(l.Addr().(*net.TCPAddr).Port), Ready: true, Serving: true})
	}
	stores[0].UpsertPeer(listed[1])
	stores[1].UpsertPeer(listed[0])

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range syncers {
		go func() { _ = s.Run(ctx) }()
	}
	_ = syncers[0].Set("inflight", "vllm-0", int64(3))
	_ = syncers[1].Set("inflight", "vllm-0", int64(2))

	// The fleet's count: this replica's and each live peer's latest.
	sum := func(values []any) any {
		var total int64
		for _, v := range values {
			total += v.(int64)
		}
		return total
	}
	for ctx.Err() == nil {
		if v, _ := syncers[0].Get("inflight", "vllm-0", sum); v == int64(5) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	v, _ := syncers[0].Get("inflight", "vllm-0", sum)
	own, _ := syncers[0].Get("inflight", "vllm-0", nil)
	fmt.Printf("epp-a: %d in flight on vllm-0 in the fleet, %d of them its own\n", v, own)
	// Output: epp-a: 5 in flight on vllm-0 in the fleet, 3 of them its own
}
