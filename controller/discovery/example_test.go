package discovery_test

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// listSource is a complete peer source: it publishes a fixed list once. A real one
// (EndpointSlices, a peers file) publishes every complete set it computes.
type listSource struct {
	list []peers.PeerMetadata
	pub  *discovery.Publisher
}

func (s *listSource) Run(ctx context.Context) error {
	s.pub.Publish(s.list)
	<-ctx.Done()
	return nil
}

// changes prints what the host's notifier receives.
type changes struct{ cancel func() }

func (c changes) UpsertPeer(p peers.PeerMetadata) {
	fmt.Println("upsert", p.ID(), p.HostPort())
	if p.Name == "epp-2" {
		c.cancel() // enough for the example
	}
}
func (c changes) DeletePeer(id string) { fmt.Println("delete", id) }

// A source needs only Run and a Publisher; PeerDiscovery gives it the plugin shape
// the EPP ecosystem uses: Start with the host's notifier, and Ready.
func Example_source() {
	d, err := discovery.NewPeerDiscovery("list", logr.Discard(), discovery.PublisherOptions{}, func(pub *discovery.Publisher) (discovery.Source, error) {
		return &listSource{pub: pub, list: []peers.PeerMetadata{
			{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005},
			{Namespace: "ns", Name: "epp-2", Address: "10.0.0.3", Port: 9005},
		}}, nil
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx, changes{cancel: cancel}); err != nil {
		panic(err)
	}
	<-d.Ready()
	fmt.Println("synced:", d.Status().Synced())
	// Output:
	// upsert ns/epp-1 10.0.0.2:9005
	// upsert ns/epp-2 10.0.0.3:9005
	// synced: true
}
