// Package standin gives the benchmarks peers that stand in for EPP replicas: a
// peer-syncer of its own (address, identity, listener) whose only member is the
// one replica the bench measures, so that replica has N-1 peers as in an
// N-replica EPP while the bench pays for a fraction of N-1 real replicas.
package standin

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
)

// Peer is a syncer for replica name of namespace ns, listening on ip:port and
// dialling from ip, whose only member is target; it pushes every interval, and its
// clock is this machine's plus clockOffset (a replica on a node of its own). The
// caller registers what it shares (a broadcast, values) and runs it.
func Peer(ns, name, ip string, port int, target peers.PeerMetadata, interval, clockOffset time.Duration) (*peersync.Syncer, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("stand-in %s: %w", name, err)
	}
	members := peers.NewMemoryPeerStore()
	members.UpsertPeer(target)
	own := net.ParseIP(ip)
	s, err := peersync.New(peersync.Options{
		Self:          peers.Self{Namespace: ns, Name: name, Addresses: []netip.Addr{netip.MustParseAddr(ip)}},
		Peers:         members,
		Listener:      l,
		Interval:      interval,
		SourceAddress: func(peers.PeerMetadata) net.IP { return own },
		Instance:      name,
		ClockOffset:   clockOffset,
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("stand-in %s: %w", name, err)
	}
	return s, nil
}
