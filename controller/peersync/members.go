package peersync

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Causes of values that stop counting, in the values_expired_total metric.
const (
	causeTTL      = "ttl"      // no message from the peer within the TTL
	causeRemoved  = "removed"  // discovery removed the peer (or changed its address)
	causeReplaced = "replaced" // a new connection's full state replaced the earlier one (a reconnect, a restart)
	causeClosed   = "closed"   // the connection ended and no other brought a full state within the TTL
)

// peerRec is one peer of the membership. valid is the generation whose values
// count (0: none); the stream fields are guarded by Syncer.mu.
type peerRec struct {
	id        string
	meta      peers.PeerMetadata
	idx       int
	valid     atomic.Uint64
	lastHeard atomic.Int64 // unix ns
	entries   atomic.Int64

	// applyMu serializes the messages of the peer's connections (an old one may still
	// be applying while a new one starts): a cell has one writer at a time.
	applyMu sync.Mutex

	in      *inStream                // the connection in force
	current atomic.Pointer[inStream] // the same, for apply: a replaced connection applies nothing more
	streams int                      // attached connections whose goroutine has not ended (an index is reused only after)
	removed bool                     // out of the membership
	counted int                      // values of the generation in force
	out     *outStream
	timer   *time.Timer // expiry after a connection ended

	// upIn and upOut are the connections the broadcasts' consumers last heard
	// were up both ways (Syncer.connectedBothWays).
	upIn  *inStream
	upOut *outConn

	// budget is what the peer may still cost this replica: every frame it sends,
	// and every message sent to it alone (Options.PeerBudget).
	budget tokenBucket
}

// followMembers applies every change of the peer set until ctx ends.
func (s *Syncer) followMembers(ctx context.Context) {
	snap := s.o.Peers.Snapshot()
	for {
		s.setMembers(ctx, snap.Peers)
		next, err := s.o.Peers.WaitForChange(ctx, snap.Version)
		if err != nil {
			return // ctx ended
		}
		snap = next
	}
}

// setMembers makes the membership ps: new peers get an index and a pusher, removed
// ones stop counting at once and lose their connections, a peer whose address
// changed starts over (its values came from what ran at the old address).
func (s *Syncer) setMembers(ctx context.Context, ps []peers.PeerMetadata) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(ps))
	var stopped []*outStream
	for _, p := range ps {
		if s.o.Self.IsName(p.Namespace, p.Name) {
			continue
		}
		id := p.ID()
		seen[id] = true
		rec := s.peers[id]
		if rec != nil && (rec.meta.Address != p.Address || rec.meta.Port != p.Port) {
			stopped = append(stopped, s.removeLocked(rec, causeRemoved))
			rec = nil
		}
		if rec == nil {
			rec = &peerRec{id: id, meta: p, idx: s.allocIdx()}
			rec.budget.init(s.o.PeerBudget, s.o.now())
			s.peers[id] = rec
			s.byAddr[p.Address] = append(s.byAddr[p.Address], rec)
			o := &outStream{peer: p, done: make(chan struct{}), wake: make(chan struct{}, 1)}
			octx, cancel := context.WithCancel(ctx)
			o.cancel = cancel
			rec.out = o
			go o.run(octx, s)
		} else {
			rec.meta = p
		}
	}
	for id, rec := range s.peers {
		if !seen[id] {
			stopped = append(stopped, s.removeLocked(rec, causeRemoved))
		}
	}
	s.growSlots(s.nextIdx)
	s.publishMembersLocked()
	// Connections waiting for their source or name to be listed are judged again.
	close(s.changed)
	s.changed = make(chan struct{})
	for _, o := range stopped {
		if o != nil {
			o.cancel()
		}
	}
}

func (s *Syncer) allocIdx() int {
	if n := len(s.freeIdx); n > 0 {
		i := s.freeIdx[n-1]
		s.freeIdx = s.freeIdx[:n-1]
		return i
	}
	i := s.nextIdx
	s.nextIdx++
	return i
}

// removeLocked takes rec out of the membership: its values stop counting, its
// connections end. It returns the pusher to stop.
func (s *Syncer) removeLocked(rec *peerRec, cause string) *outStream {
	if rec.valid.Swap(0) != 0 {
		s.m.expired.WithLabelValues(cause).Add(float64(rec.counted))
	}
	rec.counted = 0
	rec.removed = true
	rec.current.Store(nil)
	s.forgetBroadcastPeer(rec)
	if rec.in != nil {
		rec.in.conn.Close()
		rec.in = nil
	}
	if rec.timer != nil {
		rec.timer.Stop()
	}
	delete(s.peers, rec.id)
	list := s.byAddr[rec.meta.Address]
	for i, r := range list {
		if r == rec {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.byAddr, rec.meta.Address)
	} else {
		s.byAddr[rec.meta.Address] = list
	}
	if rec.streams == 0 {
		// Otherwise the last connection's goroutine frees it (detach): until then it
		// may still write the index's cells.
		s.freeIdx = append(s.freeIdx, rec.idx)
	}
	return rec.out
}

// publishMembersLocked swaps the membership Get reads: only the peers whose values
// count, with their generation in force, so that Get compares a value's generation
// without touching the peer's record. Every change of a generation in force (under
// Syncer.mu) publishes again.
func (s *Syncer) publishMembersLocked() {
	ms := make([]member, 0, len(s.peers))
	for _, rec := range s.peers {
		if g := rec.valid.Load(); g != 0 {
			ms = append(ms, member{idx: rec.idx, gen: g})
		}
	}
	s.members.Store(&ms)
	s.npeers.Store(int64(len(s.peers)))
	s.m.peers.Set(float64(len(s.peers)))
	s.m.inSync.Set(float64(len(ms)))
}

// outStreams lists the pushers. Syncer.mu is held.
func (s *Syncer) outStreams() []*outStream {
	out := make([]*outStream, 0, len(s.peers))
	for _, rec := range s.peers {
		out = append(out, rec.out)
	}
	return out
}

// isPeerAddress reports whether ip is a member's address.
func (s *Syncer) isPeerAddress(ip string) bool {
	if a, err := netip.ParseAddr(ip); err == nil {
		ip = a.Unmap().String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byAddr[ip]) > 0
}

// attach makes in the connection in force of the peer at ip that its hello names:
// it must be a member there, and not an older run of the process than a connection
// already in force.
func (s *Syncer) attach(in *inStream, ip string) (*peerRec, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rec *peerRec
	for _, r := range s.byAddr[ip] {
		if r.id == in.hello.ID() {
			rec = r
		}
	}
	if rec == nil {
		if len(s.byAddr[ip]) == 0 {
			return nil, RejectUnknownSource
		}
		return nil, RejectIdentity
	}
	if cur := rec.in; cur != nil {
		if older(in.hello, cur.hello) {
			return nil, RejectStaleIncarnation
		}
		cur.conn.Close() // the newer connection wins
	}
	if rec.timer != nil {
		rec.timer.Stop()
		rec.timer = nil
	}
	in.rec = rec
	rec.in = in
	rec.current.Store(in)
	rec.streams++
	return rec, ""
}

// older reports whether a is an earlier run of the process than b.
// The same run reconnecting (or two runs started in one nanosecond) is not older:
// the newest connection wins.
func older(a, b wire.Hello) bool { return a.Start < b.Start }

// detach ends in's part: if it was the connection in force, its values go on
// counting until the TTL from its last message, unless another connection brings a
// full state first.
func (s *Syncer) detach(in *inStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := in.rec
	if rec == nil {
		return
	}
	for _, k := range in.keys {
		k.ks.refs--
	}
	in.keys = nil
	rec.streams--
	if rec.removed {
		if rec.streams == 0 {
			s.freeIdx = append(s.freeIdx, rec.idx)
		}
		return
	}
	if rec.in != in {
		return
	}
	rec.in = nil
	rec.current.Store(nil)
	gen := in.gen.Load()
	if gen == 0 || rec.valid.Load() != gen {
		return
	}
	left := time.Duration(rec.lastHeard.Load()+int64(s.o.TTL)) - time.Duration(s.o.now().UnixNano())
	if left <= 0 {
		s.endGenerationLocked(rec, gen, causeClosed)
		return
	}
	rec.timer = time.AfterFunc(left, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.peers[rec.id] == rec {
			s.endGenerationLocked(rec, gen, causeClosed)
		}
	})
}

// expire makes in's values stop counting now: the peer sent nothing for the TTL.
func (s *Syncer) expire(in *inStream, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := in.rec
	if rec == nil || rec.in != in || in.gen.Load() == 0 {
		return
	}
	if s.endGenerationLocked(rec, in.gen.Load(), cause) && s.m.rateLimit("expire", s.o.now()) {
		s.log.Info("peer silent for the TTL: its values no longer count", "peer", rec.id, "ttl", s.o.TTL)
	}
}

// endGenerationLocked makes rec's values stop counting if gen is still its
// generation in force (cause: for the values_expired_total metric), and reports
// whether it was. Syncer.mu is held.
func (s *Syncer) endGenerationLocked(rec *peerRec, gen uint64, cause string) bool {
	if !rec.valid.CompareAndSwap(gen, 0) {
		return false
	}
	s.m.expired.WithLabelValues(cause).Add(float64(rec.counted))
	rec.counted = 0
	s.publishMembersLocked()
	return true
}

// stopAll ends every pusher and connection (Run is over).
func (s *Syncer) stopAll() {
	s.mu.Lock()
	var outs []*outStream
	for _, rec := range s.peers {
		outs = append(outs, s.removeLocked(rec, causeRemoved))
	}
	s.publishMembersLocked()
	s.mu.Unlock()
	for _, o := range outs {
		o.cancel()
		<-o.done
	}
}

// forgetBroadcastPeer drops the broadcasts' metric series of rec, which left the
// membership.
func (s *Syncer) forgetBroadcastPeer(rec *peerRec) {
	s.broadcasts.Range(func(_, v any) bool {
		v.(*Broadcast).forgetPeer(rec.id)
		return true
	})
}
