package peerset

import (
	"net/netip"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// State is Compute kept up to date one slice at a time, the way kube-proxy's
// EndpointSliceCache tracks Services: it keeps what each slice lists and, per peer,
// the listings of every slice, so that a slice event costs that slice and the peers
// it lists, and yields only the change. Its set is always Compute over the slices it
// was given (the differential fuzz test checks it after every step). It is not safe
// for concurrent use.
type State struct {
	cfg        Config
	self       peers.Self
	family     int
	membership peers.Membership

	slices map[string][]identity // by slice name: the identities it lists
	ids    map[identity]*idState
	size   int // identities that are peers
	// selves are the identities that are this replica (by name or address), and
	// whether one of their listings is eligible: what its peers decide of it.
	selves map[identity]bool
}

// idState is one identity: its listings in every slice, and what was published.
type idState struct {
	listings map[string][]listing // by slice name
	peer     *peers.PeerMetadata  // as published; nil when not a peer
}

// listing is one endpoint of one slice, reduced to what the rules need.
type listing struct {
	selfAddr bool      // one of its addresses is this replica's
	eligible bool      // admitted by the membership, with a usable first address
	cand     candidate // valid when eligible
}

// NewState returns an empty State for cfg.
func NewState(cfg Config) *State {
	self := cfg.Self
	if self.Namespace == "" {
		self.Namespace = cfg.Namespace
	}
	membership := cfg.Membership
	if membership == "" {
		membership = peers.MembershipReady
	}
	return &State{cfg: cfg, self: self, family: self.Family(), membership: membership,
		slices: map[string][]identity{}, ids: map[identity]*idState{}, selves: map[identity]bool{}}
}

// SelfListed reports whether the slices list this replica itself as a member, by
// the membership rule that makes the others peers: what the others' discovery, on
// the same slices, decides of it. A replica that is not ready (membership ready),
// terminating, or not listed at all is not.
func (s *State) SelfListed() bool {
	for _, eligible := range s.selves {
		if eligible {
			return true
		}
	}
	return false
}

// Len is the number of peers.
func (s *State) Len() int { return s.size }

// Peers returns the current set ordered by ID, as Compute would.
func (s *State) Peers() []peers.PeerMetadata {
	out := make([]peers.PeerMetadata, 0, len(s.ids))
	for _, e := range s.ids {
		if e.peer != nil {
			out = append(out, *e.peer)
		}
	}
	peers.SortByID(out)
	return out
}

// Upsert adds or replaces a slice and returns the change of the peer set. A slice
// that does not belong to the Service (another namespace or service, an FQDN slice)
// contributes nothing, as in Compute.
func (s *State) Upsert(sl *discoveryv1.EndpointSlice) peers.Change {
	touched := map[identity]bool{}
	s.upsert(sl, touched)
	return s.settle(touched)
}

// Delete removes a slice by name and returns the change.
func (s *State) Delete(name string) peers.Change {
	touched := map[identity]bool{}
	s.remove(name, touched)
	return s.settle(touched)
}

// Replace makes the given slices the whole input (a re-list) and returns the change.
func (s *State) Replace(all []discoveryv1.EndpointSlice) peers.Change {
	touched := map[identity]bool{}
	keep := map[string]bool{}
	for i := range all {
		if s.counts(&all[i]) {
			keep[all[i].Name] = true
		}
	}
	for name := range s.slices {
		if !keep[name] {
			s.remove(name, touched)
		}
	}
	for i := range all {
		s.upsert(&all[i], touched)
	}
	return s.settle(touched)
}

func (s *State) upsert(sl *discoveryv1.EndpointSlice, touched map[identity]bool) {
	if !s.counts(sl) {
		s.remove(sl.Name, touched)
		return
	}
	port := slicePort(sl, s.cfg.PortName, s.cfg.DefaultPort)
	byID := map[identity][]listing{}
	var order []identity
	for j := range sl.Endpoints {
		ep := &sl.Endpoints[j]
		if len(ep.Addresses) == 0 {
			continue
		}
		id := identityOf(sl, ep)
		if _, ok := byID[id]; !ok {
			order = append(order, id)
		}
		byID[id] = append(byID[id], s.listingOf(sl.Name, ep, port))
	}
	// Identities the slice no longer lists lose its listing; the others are
	// re-decided only when their listing in this slice changed, so an update that
	// changes one endpoint of a hundred touches one identity.
	for _, id := range s.slices[sl.Name] {
		if _, still := byID[id]; !still {
			touched[id] = true
			delete(s.ids[id].listings, sl.Name)
		}
	}
	for _, id := range order {
		e := s.ids[id]
		if e == nil {
			e = &idState{listings: map[string][]listing{}}
			s.ids[id] = e
		}
		if prev, ok := e.listings[sl.Name]; ok && slices.Equal(prev, byID[id]) {
			continue
		}
		e.listings[sl.Name] = byID[id]
		touched[id] = true
	}
	if len(order) > 0 {
		s.slices[sl.Name] = order
	} else {
		delete(s.slices, sl.Name)
	}
}

func (s *State) remove(name string, touched map[identity]bool) {
	for _, id := range s.slices[name] {
		touched[id] = true
		delete(s.ids[id].listings, name)
	}
	delete(s.slices, name)
}

// counts reports whether a slice is an input of Compute (rules 1 and 2).
func (s *State) counts(sl *discoveryv1.EndpointSlice) bool {
	return sl.Namespace == s.cfg.Namespace && sl.Labels[discoveryv1.LabelServiceName] == s.cfg.Service &&
		(sl.AddressType == discoveryv1.AddressTypeIPv4 || sl.AddressType == discoveryv1.AddressTypeIPv6)
}

func (s *State) listingOf(slice string, ep *discoveryv1.Endpoint, port int32) listing {
	l := listing{selfAddr: isSelfAddress(ep.Addresses, s.self)}
	if conds := conditionsOf(ep); s.membership.Admits(conds.ready, conds.terminating) {
		if addr, err := netip.ParseAddr(ep.Addresses[0]); err == nil && addr.Zone() == "" {
			l.eligible, l.cand = true, candidate{addr: addr, port: port, slice: slice, conds: conds}
		}
	}
	return l
}

// settle recomputes the touched identities (rules 4 and 5) and returns what changed.
func (s *State) settle(touched map[identity]bool) peers.Change {
	var change peers.Change
	for id := range touched {
		e := s.ids[id]
		if self, eligible := s.selfListing(id, e); self {
			s.selves[id] = eligible
		} else {
			delete(s.selves, id)
		}
		next := s.peerOf(id, e)
		switch {
		case next == nil && e.peer != nil:
			change.Deletes = append(change.Deletes, e.peer.ID())
			s.size--
		case next != nil && (e.peer == nil || *e.peer != *next):
			change.Upserts = append(change.Upserts, *next)
			if e.peer == nil {
				s.size++
			}
		}
		e.peer = next
		if len(e.listings) == 0 {
			delete(s.ids, id)
		}
	}
	return normalize(change)
}

// selfListing reports whether id is this replica (by name, or an address of a
// listing), and then whether one of its listings is eligible.
func (s *State) selfListing(id identity, e *idState) (self, eligible bool) {
	self = s.self.IsName(id.namespace, id.name)
	for _, ls := range e.listings {
		for _, l := range ls {
			self = self || l.selfAddr
			eligible = eligible || l.eligible
		}
	}
	return self && len(e.listings) > 0, eligible
}

func (s *State) peerOf(id identity, e *idState) *peers.PeerMetadata {
	if s.self.IsName(id.namespace, id.name) {
		return nil
	}
	var best candidate
	found := false
	for _, ls := range e.listings {
		for _, l := range ls {
			if l.selfAddr {
				return nil
			}
			if l.eligible && (!found || better(l.cand, best, s.family)) {
				best, found = l.cand, true
			}
		}
	}
	if !found {
		return nil
	}
	return &peers.PeerMetadata{
		Namespace:   id.namespace,
		Name:        id.name,
		Address:     best.addr.String(),
		Port:        best.port,
		Ready:       best.conds.ready,
		Serving:     best.conds.serving,
		Terminating: best.conds.terminating,
	}
}

// normalize orders a change: upserts by ID, deletes in byte order.
func normalize(c peers.Change) peers.Change {
	peers.SortByID(c.Upserts)
	slices.Sort(c.Deletes)
	return c
}
