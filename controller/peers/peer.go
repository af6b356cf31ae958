package peers

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
)

// PeerMetadata identifies one peer replica, where to reach it, and the state its
// source reports for it.
type PeerMetadata struct {
	// Namespace and Name are the peer's identity: the Pod a slice endpoint refers to,
	// or, for an endpoint without a targetRef, its namespace and first address.
	Namespace string
	Name      string
	// Address is a plain IP address (IPv6 without brackets).
	Address string
	// Port is the peer's sync port.
	Port int32
	// Ready, Serving and Terminating are the endpoint's conditions as its source
	// reports them (an unknown ready or serving condition counts as true, an unknown
	// terminating one as false). With MembershipReady every peer is ready and not
	// terminating; with MembershipAlive a peer may be not ready (a standby).
	Ready       bool
	Serving     bool
	Terminating bool
}

// ID is the peer's identity, "namespace/name". Peers are ordered by ID (byte order).
func (p PeerMetadata) ID() string { return p.Namespace + "/" + p.Name }

// HostPort is the address to dial, with IPv6 addresses in brackets.
func (p PeerMetadata) HostPort() string {
	if a, err := netip.ParseAddr(p.Address); err == nil {
		return netip.AddrPortFrom(a, uint16(p.Port)).String()
	}
	return p.Address + ":" + strconv.Itoa(int(p.Port))
}

// CompareID orders peers by ID in byte order without building the IDs when the
// namespaces are equal (the common case).
func CompareID(a, b PeerMetadata) int {
	if a.Namespace == b.Namespace {
		return cmp.Compare(a.Name, b.Name)
	}
	return cmp.Compare(a.ID(), b.ID())
}

// SortByID orders peers by ID in place.
func SortByID(ps []PeerMetadata) { slices.SortFunc(ps, CompareID) }

// PeerNotifier receives changes of the peer set.
type PeerNotifier interface {
	// UpsertPeer adds a peer, or replaces the peer with the same ID.
	UpsertPeer(PeerMetadata)
	// DeletePeer removes the peer with this ID; unknown IDs are ignored.
	DeletePeer(id string)
}

// BatchNotifier is a PeerNotifier that can apply a whole change at once, so that its
// readers never see a half-applied change. Tracker prefers it when available.
type BatchNotifier interface {
	PeerNotifier
	ApplyPeerChange(Change)
}

// PeerStore is a PeerNotifier that can be read.
type PeerStore interface {
	PeerNotifier
	// Peers returns the current peers ordered by ID. The caller owns the slice.
	Peers() []PeerMetadata
	// Peer returns the peer with this ID.
	Peer(id string) (PeerMetadata, bool)
}

// Change is the difference between two peer sets.
type Change struct {
	// Upserts are new peers and peers whose address, port or conditions changed,
	// ordered by ID.
	Upserts []PeerMetadata
	// Deletes are the IDs of peers that left, in byte order.
	Deletes []string
}

// Empty reports whether the change changes nothing.
func (c Change) Empty() bool { return len(c.Upserts) == 0 && len(c.Deletes) == 0 }

// Apply sends c to n: the whole change at once to a BatchNotifier, else the deletes
// and then the upserts, one call each, in order.
func (c Change) Apply(n PeerNotifier) {
	if b, ok := n.(BatchNotifier); ok {
		b.ApplyPeerChange(c)
		return
	}
	for _, id := range c.Deletes {
		n.DeletePeer(id)
	}
	for _, p := range c.Upserts {
		n.UpsertPeer(p)
	}
}

// Diff returns what turns the set old into the set cur. Both are keyed by ID; their
// order does not matter.
func Diff(old, cur []PeerMetadata) Change {
	type key struct{ namespace, name string }
	before := make(map[key]PeerMetadata, len(old))
	for _, p := range old {
		before[key{p.Namespace, p.Name}] = p
	}
	var c Change
	for _, p := range cur {
		k := key{p.Namespace, p.Name}
		if prev, ok := before[k]; !ok || prev != p {
			c.Upserts = append(c.Upserts, p)
		}
		delete(before, k)
	}
	for _, p := range before {
		c.Deletes = append(c.Deletes, p.ID())
	}
	SortByID(c.Upserts)
	slices.Sort(c.Deletes)
	return c
}
