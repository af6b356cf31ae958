// Package staticsource is the smallest peer source there can be: a fixed list of
// peers, published once. It shows (and the tests prove) that a new peer source is a
// package that implements discovery.Source plus one registration line.
package staticsource

import (
	"context"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Source publishes a fixed peer set (the Publisher leaves the replica out).
type Source struct {
	set []peers.PeerMetadata
	pub *discovery.Publisher
}

var _ discovery.Source = (*Source)(nil)

// New returns a source of the peers in set.
func New(set []peers.PeerMetadata, pub *discovery.Publisher) *Source {
	return &Source{set: set, pub: pub}
}

// Run publishes the set once, then waits for ctx to end.
func (s *Source) Run(ctx context.Context) error {
	s.pub.Publish(s.set)
	<-ctx.Done()
	return nil
}

// Setting selects the source in a program: --epp-peer-static=<anything>, or the
// plugin parameter "static".
var Setting = discovery.Setting{Param: "static", Flag: "epp-peer-static", Usage: "Use the static list of peers (tests)."}

// Spec is the source's entry in a program's list of sources: the source "static",
// selected by Setting, that publishes set.
func Spec(set []peers.PeerMetadata) discovery.SourceSpec {
	return discovery.SourceSpec{
		Name:        "static",
		Select:      Setting,
		Placeholder: "<anything>",
		Settings: func(b *discovery.Binder) discovery.Bound {
			var arg string
			b.String(&arg, Setting, nil)
			return discovery.Bound{New: func(d discovery.Deps) (discovery.Source, error) { return New(set, d.Publisher), nil }}
		},
	}
}
