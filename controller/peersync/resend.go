package peersync

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// Nothing a replica publishes is lost to a connection gap. The publisher numbers
// its frames (1, 2, ... for the life of its process) and keeps the latest ones
// (resendRing). Each connection starts with a cursor, the number of the last frame
// published; a peer tracks, per publisher process, the highest number it has seen
// and the ranges below it that it has not (originCursor), and asks the publisher
// for those (a Resend frame on its own connection to it). The publisher sends them
// again, or, when it no longer keeps them all, its snapshot as a resync, whose end
// says which frames it covers. A replica that starts is covered by the snapshot it
// bootstraps from: it asks a publisher only for what came after it first heard of
// it, unless it had no snapshot (every peer was cold) or the publisher started
// after that snapshot was taken.

// resendRetry is how long a peer waits for the frames it asked for before it asks
// again (the publisher ignores a request while it still sends a snapshot or a
// resync to that peer).
const resendRetry = time.Second

// maxMissingRanges bounds the ranges of frames a peer tracks as missing from one
// publisher: past it, the last two merge (some frames are asked twice).
const maxMissingRanges = 256

// resendRing keeps the latest frames a broadcast published, within max bytes, by
// sequence number (Broadcast.flushMu).
type resendRing struct {
	frames [][]byte // frames[i] is frame first+i
	first  uint64
	bytes  int
	max    int
}

func (r *resendRing) add(seq uint64, f []byte) {
	if len(r.frames) == 0 {
		r.first = seq
	}
	r.frames = append(r.frames, f)
	r.bytes += len(f)
	for r.bytes > r.max && len(r.frames) > 0 {
		r.bytes -= len(r.frames[0])
		r.frames[0] = nil
		r.frames = r.frames[1:]
		r.first++
	}
}

// get returns frames from to to, in order, and whether every one of them is kept.
func (r *resendRing) get(from, to uint64) ([][]byte, bool) {
	last := r.first + uint64(len(r.frames)) - 1
	if len(r.frames) == 0 || from < r.first || to > last {
		return nil, false
	}
	return r.frames[from-r.first : to-r.first+1], true
}

// originCursor is what this replica received of one broadcast from one peer's
// process (its incarnation: the nonce of its hello).
type originCursor struct {
	lock  sync.Mutex
	nonce uint64
	start uint64 // the process's start (its hello), unix ns
	seen  bool
	// high is the highest frame number seen (or named by a cursor); frames up to
	// base were published before this replica first heard of the process.
	high, base uint64
	// settled: the frames up to base are judged (see settle); before, this
	// replica is not warm yet, and what its snapshot will cover is not known.
	settled bool
	missing []wire.SeqRange // not received, ascending, disjoint, each ≤ high
	asked   time.Time       // when missing was last asked for
}

// reset makes c the cursor of a process not heard of before.
func (c *originCursor) reset(nonce, start uint64) {
	c.nonce, c.start, c.seen, c.high, c.base, c.settled, c.missing, c.asked = nonce, start, false, 0, 0, false, nil, time.Time{}
}

// cursor is rec's cursor of the broadcast name (created empty).
func (rec *peerRec) cursor(name string) *originCursor {
	rec.cursorsMu.Lock()
	defer rec.cursorsMu.Unlock()
	if rec.cursors == nil {
		rec.cursors = map[string]*originCursor{}
	}
	c := rec.cursors[name]
	if c == nil {
		c = &originCursor{}
		rec.cursors[name] = c
	}
	return c
}

// count of frames in the ranges.
func count(rs []wire.SeqRange) int64 {
	var n int64
	for _, r := range rs {
		n += int64(r.To - r.From + 1)
	}
	return n
}

// addMissing adds from..to (ascending: above every range already missing).
func (c *originCursor) addMissing(from, to uint64) int64 {
	if from > to {
		return 0
	}
	if n := len(c.missing); n > 0 && c.missing[n-1].To+1 == from {
		c.missing[n-1].To = to
	} else {
		c.missing = append(c.missing, wire.SeqRange{From: from, To: to})
	}
	if len(c.missing) > maxMissingRanges {
		n := len(c.missing)
		c.missing[n-2].To = c.missing[n-1].To
		c.missing = c.missing[:n-1]
	}
	return int64(to - from + 1)
}

// removeMissing removes seq, reporting whether it was missing.
func (c *originCursor) removeMissing(seq uint64) bool {
	for i, r := range c.missing {
		switch {
		case seq < r.From:
			return false
		case seq > r.To:
			continue
		case r.From == r.To:
			c.missing = append(c.missing[:i], c.missing[i+1:]...)
		case seq == r.From:
			c.missing[i].From++
		case seq == r.To:
			c.missing[i].To--
		default:
			c.missing = append(c.missing[:i+1], c.missing[i:]...)
			c.missing[i].To = seq - 1
			c.missing[i+1].From = seq + 1
		}
		return true
	}
	return false
}

// removeUpTo removes every missing frame up to seq, and returns how many.
func (c *originCursor) removeUpTo(seq uint64) int64 {
	var n int64
	out := c.missing[:0]
	for _, r := range c.missing {
		switch {
		case r.To <= seq:
			n += int64(r.To - r.From + 1)
		case r.From <= seq:
			n += int64(seq - r.From + 1)
			out = append(out, wire.SeqRange{From: seq + 1, To: r.To})
		default:
			out = append(out, r)
		}
	}
	c.missing = out
	return n
}

// resyncExpected reports whether a resync from the process nonce may come: this
// replica asked it for frames it misses.
func (c *originCursor) resyncExpected(nonce uint64) bool {
	return c.nonce == nonce && len(c.missing) > 0 && !c.asked.IsZero()
}

// needsHistory reports whether a replica that first heard of a process started at
// start misses what it published before: when this replica had no snapshot to
// start from, or the process started after that snapshot was asked for (a second
// of clock skew allowed).
func (b *Broadcast) needsHistory(start uint64) bool {
	if !b.o.Bootstrap {
		return false // it never took the past: it takes what comes
	}
	if b.warmEmpty.Load() {
		return true
	}
	asked := b.warmAsked.Load()
	return asked != 0 && int64(start) >= asked-int64(time.Second)
}

// observeSeq follows a sequenced frame (or a cursor) of in's process, reporting
// whether its messages are new here (false: a duplicate, or a cursor). Frames found
// missing are asked for.
func (s *Syncer) observeSeq(in *inStream, b *Broadcast, flags byte, seq uint64) bool {
	rec := in.rec
	c := rec.cursor(b.name)
	cursor := flags&wire.BroadcastCursor != 0
	var gaps, filled int64
	deliver := false
	c.lock.Lock()
	if c.nonce != in.hello.Nonce {
		// A process not heard of before (a peer's first, or its restart): the old
		// one's missing frames are gone with it.
		filled = count(c.missing)
		c.reset(in.hello.Nonce, in.hello.Start)
	}
	if !c.seen {
		c.seen = true
		c.base = seq
		if !cursor {
			c.base = seq - 1
		}
		c.high = c.base
		if b.isWarm() {
			c.settled = true
			if b.needsHistory(c.start) {
				gaps += c.addMissing(1, c.base)
			}
		}
	}
	switch {
	case seq > c.high:
		if cursor {
			gaps += c.addMissing(c.high+1, seq)
		} else {
			gaps += c.addMissing(c.high+1, seq-1)
			deliver = true
		}
		c.high = seq
	case !cursor && c.removeMissing(seq):
		deliver = true
		filled++
	}
	ask := len(c.missing) > 0 && (c.asked.IsZero() || s.o.now().Sub(c.asked) >= resendRetry)
	c.lock.Unlock()
	b.missingChanged(rec.id, gaps, filled)
	if ask {
		s.askResend(rec, b)
	}
	return deliver
}

// missingChanged counts gaps found and frames missing no more.
func (b *Broadcast) missingChanged(peer string, gaps, filled int64) {
	if gaps == 0 && filled == 0 {
		return
	}
	if gaps > 0 {
		b.peerCounters(peer).gaps.Add(float64(gaps))
	}
	b.s.m.broadcastMissing.WithLabelValues(b.name).Set(float64(b.missing.Add(gaps - filled)))
}

// resyncEnded takes the end of a resync from in's process: the frames up to seq
// are covered.
func (s *Syncer) resyncEnded(in *inStream, b *Broadcast, seq uint64) {
	c := in.rec.cursor(b.name)
	c.lock.Lock()
	var filled int64
	if c.nonce == in.hello.Nonce {
		filled = c.removeUpTo(seq)
		c.asked = time.Time{}
	}
	c.lock.Unlock()
	b.missingChanged(in.rec.id, 0, filled)
	b.peerCounters(in.rec.id).resyncsReceived.Inc()
}

// settleCursors judges, once b is warm, what each peer's process published before
// this replica first heard of it (see needsHistory).
func (s *Syncer) settleCursors(b *Broadcast) {
	s.mu.Lock()
	recs := make([]*peerRec, 0, len(s.peers))
	for _, rec := range s.peers {
		recs = append(recs, rec)
	}
	s.mu.Unlock()
	for _, rec := range recs {
		c := rec.cursor(b.name)
		c.lock.Lock()
		var gaps int64
		if c.seen && !c.settled {
			c.settled = true
			if b.needsHistory(c.start) {
				gaps = c.addMissingBelow(c.base)
			}
		}
		c.lock.Unlock()
		b.missingChanged(rec.id, gaps, 0)
	}
}

// addMissingBelow adds 1..base, below every range already missing.
func (c *originCursor) addMissingBelow(base uint64) int64 {
	if base == 0 {
		return 0
	}
	c.missing = append([]wire.SeqRange{{From: 1, To: base}}, c.missing...)
	if len(c.missing) > 1 && c.missing[1].From == base+1 {
		c.missing[0].To = c.missing[1].To
		c.missing = append(c.missing[:1], c.missing[2:]...)
	}
	return int64(base)
}

// askResend asks rec's process for the frames of b this replica misses, on this
// replica's own connection to it (when it has one that takes them; the push loop
// asks again otherwise).
func (s *Syncer) askResend(rec *peerRec, b *Broadcast) {
	s.mu.Lock()
	o := rec.out
	s.mu.Unlock()
	if o == nil {
		return
	}
	oc := o.conn.Load()
	if oc == nil || !oc.sequenced.Load() {
		return
	}
	c := rec.cursor(b.name)
	c.lock.Lock()
	if len(c.missing) == 0 {
		c.lock.Unlock()
		return
	}
	r := wire.Resend{Name: b.name, Incarnation: c.nonce, Ranges: append([]wire.SeqRange(nil), c.missing[:min(len(c.missing), wire.MaxResendRanges)]...)}
	c.asked = s.o.now()
	c.lock.Unlock()
	o.send(oc, wire.AppendResend(nil, r))
}

// checkResends runs each interval: missing frames not asked for, or asked for
// longer than resendRetry ago, are asked for; a connection that skipped frames for a
// slow peer sends the cursors that tell it.
func (s *Syncer) checkResends(now time.Time, outs []*outStream) {
	for _, o := range outs {
		if c := o.conn.Load(); c != nil && c.skipped.CompareAndSwap(true, false) {
			s.broadcasts.Range(func(_, v any) bool {
				v.(*Broadcast).sendCursor(c)
				return true
			})
		}
	}
	s.mu.Lock()
	recs := make([]*peerRec, 0, len(s.peers))
	for _, rec := range s.peers {
		recs = append(recs, rec)
	}
	s.mu.Unlock()
	for _, rec := range recs {
		rec.cursorsMu.Lock()
		var due []string
		for name, c := range rec.cursors {
			c.lock.Lock()
			if len(c.missing) > 0 && (c.asked.IsZero() || now.Sub(c.asked) >= resendRetry) {
				due = append(due, name)
			}
			c.lock.Unlock()
		}
		rec.cursorsMu.Unlock()
		for _, name := range due {
			if v, ok := s.broadcasts.Load(name); ok {
				s.askResend(rec, v.(*Broadcast))
			}
		}
	}
}

// serveResend answers in's peer's Resend frame, on this replica's own connection to
// it: the frames asked for, or a resync when they are not all kept any more. A
// request for another process of this replica (one that restarted since), or while
// a snapshot or a resync is on its way to the peer, is left: the peer asks again.
func (s *Syncer) serveResend(ctx context.Context, in *inStream, body []byte) (string, error) {
	r, err := wire.ParseResend(body, wire.Limits{MaxNameBytes: 64})
	if err != nil {
		return RejectMalformed, err
	}
	v, ok := s.broadcasts.Load(r.Name)
	if !ok || r.Incarnation != s.hello.Nonce {
		return "", nil
	}
	b := v.(*Broadcast)
	s.mu.Lock()
	o := in.rec.out
	s.mu.Unlock()
	if o == nil || !in.rec.bulk.CompareAndSwap(false, true) {
		return "", nil
	}
	go func() {
		defer in.rec.bulk.Store(false)
		c := s.awaitBroadcastConn(ctx, o)
		if c == nil || !c.sequenced.Load() {
			return
		}
		b.flushMu.Lock()
		var frames [][]byte
		all := true
		for _, g := range r.Ranges {
			if g.To > b.seq {
				g.To = b.seq
			}
			if g.From > g.To {
				continue
			}
			fs, kept := b.ring.get(g.From, g.To)
			if !kept {
				all = false
				break
			}
			frames = append(frames, fs...)
		}
		covered := b.seq
		b.flushMu.Unlock()
		pc := b.peerCounters(o.peer.ID())
		if !all {
			pc.resyncsServed.Inc()
			s.log.Info("a peer missed frames no longer kept: sending it a resync", "broadcast", b.name, "peer", o.peer.ID(), "upTo", covered)
			b.writeSnapshot(o, c, wire.BroadcastSnapshot|wire.BroadcastResync, covered)
			return
		}
		for _, f := range frames {
			if !c.q.putBulk(queued{frame: wire.SetResent(f), kind: kindBulk}, c.broken) {
				return
			}
			pc.resent.Inc()
		}
	}()
	return "", nil
}

// broadcastPeer is one peer's counters of one broadcast.
type broadcastPeer struct {
	delivered, skipped, resent, gaps, resyncsServed, resyncsReceived prometheus.Counter
}

// peerCounters returns peer's counters of b (created on first use; forgetPeer
// drops them).
func (b *Broadcast) peerCounters(peer string) *broadcastPeer {
	if v, ok := b.peers.Load(peer); ok {
		return v.(*broadcastPeer)
	}
	m := b.s.m
	frames := m.broadcastPeerFrames.MustCurryWith(prometheus.Labels{"broadcast": b.name, "peer": peer})
	resyncs := m.broadcastResyncs.MustCurryWith(prometheus.Labels{"broadcast": b.name, "peer": peer})
	bp := &broadcastPeer{
		delivered: frames.WithLabelValues("delivered"), skipped: frames.WithLabelValues("skipped"), resent: frames.WithLabelValues("resent"),
		gaps:          m.broadcastGaps.WithLabelValues(b.name, peer),
		resyncsServed: resyncs.WithLabelValues("served"), resyncsReceived: resyncs.WithLabelValues("received"),
	}
	v, _ := b.peers.LoadOrStore(peer, bp)
	return v.(*broadcastPeer)
}

// forgetPeer drops what b holds of peer, and its metric series: it left the
// membership.
func (b *Broadcast) forgetPeer(peer string, missing int64) {
	if _, ok := b.peers.LoadAndDelete(peer); ok {
		l := prometheus.Labels{"broadcast": b.name, "peer": peer}
		b.s.m.broadcastPeerFrames.DeletePartialMatch(l)
		b.s.m.broadcastResyncs.DeletePartialMatch(l)
		b.s.m.broadcastGaps.DeletePartialMatch(l)
	}
	b.missingChanged(peer, 0, missing)
}
