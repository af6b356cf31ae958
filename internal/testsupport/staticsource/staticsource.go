// Package staticsource is the smallest peer source there can be: a fixed list of
// peers, published once. It shows (and the tests prove) that a new peer source is a
// package that implements discovery.Source plus one registration line.
package staticsource

import (
	"context"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Source publishes a fixed peer set, without self.
type Source struct {
	set  []peers.PeerMetadata
	self peers.Self
	pub  *discovery.Publisher
}

var _ discovery.Source = (*Source)(nil)

// New returns a source of the peers in set, leaving out self.
func New(set []peers.PeerMetadata, self peers.Self, pub *discovery.Publisher) *Source {
	return &Source{set: set, self: self, pub: pub}
}

// Run publishes the set once, then waits for ctx to end.
func (s *Source) Run(ctx context.Context) error {
	kept := make([]peers.PeerMetadata, 0, len(s.set))
	for _, p := range s.set {
		if !s.self.Is(p) {
			kept = append(kept, p)
		}
	}
	s.pub.Publish(kept)
	<-ctx.Done()
	return nil
}
