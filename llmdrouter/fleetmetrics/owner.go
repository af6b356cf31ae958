package fleetmetrics

import (
	"hash/fnv"
	"slices"
	"time"
)

// owner is the replica of members that scrapes server: the highest score of
// rendezvous hashing (each replica's score for the server, the same on every
// replica). When a replica joins or leaves, only the servers it wins or held move.
// members must not be empty.
func owner(server string, members []string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if s := score(server, m); best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// score is replica's rendezvous score for server: FNV-1a of both, spread by
// splitmix64's finalizer (FNV alone leaves similar names with similar scores).
func score(server, replica string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(server))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(replica))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// liveness is when each peer last sent a message of this source (a share or a
// heartbeat): a peer is a member, and owns servers, while that is within the TTL.
type liveness map[string]time.Time

// members are self and the peers heard from since now-ttl, sorted.
func (l liveness) members(self string, now time.Time, ttl time.Duration) []string {
	out := []string{self}
	for p, at := range l {
		if now.Sub(at) < ttl {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
