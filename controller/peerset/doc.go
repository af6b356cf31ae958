// Package peerset computes an EPP replica's peers from its Service's EndpointSlices.
//
// Compute is a pure function: the slices of the Service and the replica's own
// identity go in, the peer set comes out. It merges endpoints across slices the way
// kube-proxy's EndpointSliceCache does, so that one Pod listed by several slices (an
// IPv4 and an IPv6 slice, or a slice move by the EndpointSlice controller) is one
// peer, and its result never depends on the order in which slices are given:
//
//  1. Only slices of the configured namespace labelled
//     kubernetes.io/service-name=<service> count; FQDN slices are ignored.
//  2. An endpoint is eligible when it has at least one address (the first one is
//     used), conditions.terminating is not true, and, with the default membership
//     (peers.MembershipReady), conditions.ready is nil or true; with
//     peers.MembershipAlive a not-ready endpoint is eligible too.
//  3. Its identity is targetRef namespace/name (the slice's namespace when the
//     targetRef has none), or namespace/first address without a targetRef.
//  4. An identity is a peer when it is eligible in at least one slice. Address and port
//     come from a slice where it is eligible, preferring the replica's own address
//     family, then the slice whose name sorts first.
//  5. The replica itself is excluded by identity (its Pod name in the namespace) and by
//     address: if any address of an identity, in any slice, is one of the replica's
//     own, the whole identity is excluded.
//  6. The port is the slice's port with the configured name, else the default port.
//  7. A peer's Ready, Serving and Terminating are the conditions of the listing its
//     address comes from (unknown ready and serving count as true, serving as
//     ready; unknown terminating as false).
package peerset
