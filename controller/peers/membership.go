package peers

import "fmt"

// Membership says which endpoints of the peer source are peers.
type Membership string

const (
	// MembershipReady (the default): endpoints that are ready (or of unknown
	// readiness) and not terminating.
	MembershipReady Membership = "ready"
	// MembershipAlive: also endpoints that are not ready, as long as they are not
	// terminating. An EPP that runs with leader election reports ready only on its
	// leader; with alive, its standbys are peers too and can be warmed.
	MembershipAlive Membership = "alive"
)

// ParseMembership accepts "ready" and "alive"; "" is MembershipReady.
func ParseMembership(s string) (Membership, error) {
	switch Membership(s) {
	case "", MembershipReady:
		return MembershipReady, nil
	case MembershipAlive:
		return MembershipAlive, nil
	}
	return "", fmt.Errorf("%q is not a membership: want %q or %q", s, MembershipReady, MembershipAlive)
}

// Admits reports whether an endpoint with these conditions is a peer.
func (m Membership) Admits(ready, terminating bool) bool {
	if terminating {
		return false
	}
	return ready || m == MembershipAlive
}
