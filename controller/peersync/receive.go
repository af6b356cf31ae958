package peersync

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// Reasons a peer's connection or message is refused, in the rejections_total metric.
const (
	RejectUnknownSource    = "unknown-source"    // the source address is no peer's (after waiting for discovery to list it)
	RejectIdentity         = "identity"          // the hello names another replica than the peer at that address, or one its certificate does not name
	RejectStaleIncarnation = "stale-incarnation" // an older run of the peer's process than one already connected
	RejectClockSkew        = "clock-skew"        // a hello whose start time is further in the future than maxClockSkew
	RejectNotReady         = "not-ready"         // this replica's discovery had no peer set within the handshake timeout
	RejectTooManyPending   = "too-many-pending"  // over the bound of connections not yet admitted (in all or from one address)
	RejectHandshakeTimeout = "handshake-timeout" // TLS, preface or hello not done within the handshake timeout
	RejectPreface          = "preface"           // not this protocol
	RejectTLS              = "tls"               // the TLS handshake failed
	RejectOversized        = "oversized"         // a hello or message over its size limit
	RejectValueTooLarge    = "value-too-large"   // a value over maxValueBytes (the rest of the message is kept)
	RejectUndecodable      = "undecodable"       // a value that does not decode as this replica's type of its key (left out)
	RejectMalformed        = "malformed"         // a message that does not decode, or refers to what it never defined
	RejectStalled          = "stalled"           // a peer silent for the TTL in the middle of a message
	RejectTooManyEntries   = "too-many-entries"  // a peer defining more entries than its bound
	RejectTooManyKeys      = "too-many-keys"     // a peer defining more keys than maxKeys, or past the bound of keys in all
	RejectUnknownBroadcast = "unknown-broadcast" // a frame of a broadcast this replica has not registered (left out)
	RejectBudget           = "budget"            // a peer over its budget: what it sent and what was sent to it alone (Options.PeerBudget)
)

// lookAgain is how long a replica that finds a peer silent for the TTL reads once
// more before it expires it: enough for bytes that wait in the socket.
const lookAgain = 20 * time.Millisecond

// rejectReasons are every reason, for the metrics (created at 0).
var rejectReasons = []string{RejectUnknownSource, RejectIdentity, RejectStaleIncarnation, RejectClockSkew, RejectNotReady,
	RejectTooManyPending, RejectHandshakeTimeout, RejectPreface, RejectTLS, RejectOversized, RejectValueTooLarge,
	RejectUndecodable, RejectMalformed, RejectStalled, RejectTooManyEntries, RejectTooManyKeys, RejectUnknownBroadcast, RejectBudget}

// inStream is one peer's connection to this replica, and what it defined.
type inStream struct {
	rec     *peerRec
	conn    net.Conn
	hello   wire.Hello
	gen     atomic.Uint64 // of its latest full state; 0 before one (written under the peer's apply lock)
	keys    map[uint64]*inKey
	entries []inEntry // by entry index (the pusher reuses freed indexes: dense)
	live    int       // entries defined
	decoded []*peerValue

	broadcast wire.Broadcast // the frame being read (reused)
}

// inKey is a key a peer's connection defined: how the peer encodes it, and this
// replica's state of it.
type inKey struct {
	rk   *wire.RemoteKey
	ks   *keyState
	plan atomic.Pointer[wire.Plan] // for the local type (a key's local type never changes)
}

func (k *inKey) planFor(lc *wire.Codec) *wire.Plan {
	if p := k.plan.Load(); p != nil && p.Local() == lc {
		return p
	}
	p := k.rk.PlanFor(lc)
	k.plan.Store(p)
	return p
}

type inEntry struct {
	key *inKey
	sl  *slot
	// c is the peer's cell of sl, valid while Syncer.layout is layout: a write
	// touches the cell alone, not the slot (one cache miss instead of two).
	c      *cell
	layout uint64
}

// serveConn admits a connection, then applies its messages until it ends or stays
// silent for the TTL.
func (s *Syncer) serveConn(ctx context.Context, conn net.Conn, ip string, admitted func()) {
	defer conn.Close()
	raw := conn // closed on cancellation: conn becomes the TLS connection below
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	paced := newPacedConn(conn, s.o.ReadTick, &s.lastRead)
	in, c := s.admit(ctx, paced, ip)
	if in == nil {
		return
	}
	paced.pace() // from here on, frames are read at the ticks (Options.ReadTick)
	conn = c     // TLS, if on
	defer s.detach(in)
	admitted()
	rec := in.rec
	s.mu.Lock()
	if o := rec.out; o != nil {
		o.up()
	}
	s.mu.Unlock()
	s.connectedBothWays(rec.id)
	br := bufio.NewReaderSize(conn, 64<<10)
	// One message at a time: its buffer and decoded form are reused (what a message
	// defines is copied out, values into their cells).
	var st wire.State
	var buf []byte
	// The read deadline is the TTL after the last message. It is not moved on every
	// message (it is a timer to move): when it fires early, it is moved to the TTL
	// after the last message, and only a real silence of the TTL expires the peer.
	last := s.o.now()
	_ = conn.SetDeadline(time.Time{})
	deadline := last.Add(s.o.TTL)
	_ = conn.SetReadDeadline(deadline)
	looked := false
	for {
		// Wait for a message's first byte: a deadline that fires here has consumed
		// nothing, so the connection can go on.
		if _, err := br.Peek(1); err != nil {
			if isTimeout(err) {
				if s.o.now().Sub(last) < s.o.TTL {
					deadline = last.Add(s.o.TTL)
					_ = conn.SetReadDeadline(deadline)
					continue
				}
				if !looked {
					// Silent for the TTL, unless this replica is the one that
					// stopped (frozen, descheduled): what the peer sent meanwhile
					// waits in the socket, and a peer whose bytes wait is not silent.
					looked = true
					deadline = s.o.now().Add(lookAgain)
					_ = conn.SetReadDeadline(deadline)
					continue
				}
				s.expire(in, causeTTL)
				return
			}
			if !isClosed(err) {
				s.rejectRead(err, ip)
			}
			return
		}
		looked = false
		// A message has the TTL from its first byte to arrive whole (a snapshot's
		// frames are large): the deadline moves when less than half of it is left.
		if now := s.o.now(); deadline.Sub(now) < s.o.TTL/2 {
			deadline = now.Add(s.o.TTL)
			_ = conn.SetReadDeadline(deadline)
		}
		body, err := wire.ReadFrameInto(br, s.o.MaxMessageBytes, buf)
		if err != nil {
			if isTimeout(err) {
				s.reject(RejectStalled, "a peer stalled in the middle of a message; closing its connection", "peer", rec.id, "ttl", s.o.TTL)
				s.expire(in, causeTTL)
				return
			}
			if !isClosed(err) {
				s.rejectRead(err, ip)
			}
			return
		}
		now := s.o.now()
		s.m.receivedBytes.Add(float64(len(body)))
		buf = body
		if !s.charge(rec, len(body)) {
			return // over its budget: cut off
		}
		switch wire.FrameType(body) {
		case wire.TypeState:
		case wire.TypeBroadcast:
			rec.lastHeard.Store(now.UnixNano())
			if reason, err := s.receiveBroadcast(in, body); err != nil {
				s.reject(reason, "a broadcast frame that cannot be read; closing the peer's connection", "peer", rec.id, "error", err.Error())
				return
			}
			last = s.o.now() // silence starts once the frame is handled, not when it arrived
			continue
		default:
			// A newer peer sends a new type only to a replica whose features line
			// names it: this is garbage.
			s.reject(RejectMalformed, "a frame of a type this replica does not know; closing the peer's connection", "peer", rec.id, "type", wire.FrameType(body))
			return
		}
		s.m.receivedMessages.Inc()
		n, err := wire.ParseStateInto(&st, body, s.lim)
		if errors.Is(err, wire.ErrValueTooLarge) {
			s.m.rejections.WithLabelValues(RejectValueTooLarge).Add(float64(n))
			err = nil
		}
		if err != nil {
			s.reject(RejectMalformed, "a malformed message; closing the peer's connection", "peer", rec.id, "error", err.Error())
			return
		}
		if reason, err := s.apply(in, &st, now); err != nil {
			s.reject(reason, "a message that cannot be applied; closing the peer's connection", "peer", rec.id, "error", err.Error())
			return
		}
		last = s.o.now()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isClosed reports whether err means the connection ended (closed by either end,
// or reset by the other: a peer closing with unread bytes resets), not that it
// carried something wrong.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET)
}

func (s *Syncer) rejectRead(err error, ip string) {
	switch {
	case errors.Is(err, wire.ErrFrameTooLarge):
		s.reject(RejectOversized, "a message over the size limit; closing the peer's connection", "address", ip, "error", err.Error())
	case isClosed(err):
	case isTimeout(err):
	default:
		s.reject(RejectMalformed, "a malformed message; closing the peer's connection", "address", ip, "error", err.Error())
	}
}

// reject counts a refusal and logs it (at most once a second per reason).
func (s *Syncer) reject(reason, msg string, kv ...any) {
	s.m.rejections.WithLabelValues(reason).Inc()
	s.reasons.Store(reason, true) // a broadcast consumer's own reasons show in the document too
	if s.m.rateLimit(reason, s.o.now()) {
		s.log.Info(msg, append([]any{"reason", reason}, kv...)...)
	}
}

var errUndefined = errors.New("refers to an index it never defined")

// entry is the entry defined at idx, or nil.
func (in *inStream) entry(idx uint64) *inEntry {
	if idx >= uint64(len(in.entries)) || in.entries[idx].sl == nil {
		return nil
	}
	return &in.entries[idx]
}

// apply applies one state message of in. Its bounds are checked before anything is
// created: keys per peer and in all, entries per peer, slots in all.
func (s *Syncer) apply(in *inStream, st *wire.State, now time.Time) (string, error) {
	in.rec.applyMu.Lock()
	defer in.rec.applyMu.Unlock()
	rec := in.rec
	if rec.current.Load() != in {
		return "", nil // replaced by a newer connection, or the peer was removed: its writes are over
	}
	if st.Full {
		in.gen.Store(s.gen.Add(1))
		s.releaseKeys(in.keys)
		in.keys = map[uint64]*inKey{}
		clear(in.entries)
		in.entries, in.live = in.entries[:0], 0
	} else if in.gen.Load() == 0 {
		return RejectMalformed, errors.New("a delta before any full state")
	}
	gen := in.gen.Load()
	if n := len(in.keys) + len(st.Keys); n > s.o.MaxKeys {
		return RejectTooManyKeys, fmt.Errorf("%d keys: more than maxKeys (%d)", n, s.o.MaxKeys)
	}
	if bound := s.entryBound(); in.live+len(st.Entries) > bound {
		return RejectTooManyEntries, fmt.Errorf("%d entries: more than a peer may define (%d: twice this replica's %d entries plus 256, at least %d, at most maxEntries %d)",
			in.live+len(st.Entries), bound, s.localEntries.Load(), s.o.MinEntryBound, s.o.MaxEntries)
	}
	if len(st.Entries) > 0 && s.slotCount.Load()+int64(len(st.Entries)) > s.slotBudget() {
		// Generations replaced (reconnects, restarts) leave slots behind until a sweep.
		if n := s.sweep(); n > 0 {
			s.log.V(1).Info("swept slots that hold nothing, over the budget", "slots", n)
		}
		if s.slotCount.Load()+int64(len(st.Entries)) > s.slotBudget() {
			return RejectTooManyEntries, fmt.Errorf("%d entries would take the slots of every key over their budget (%d)", len(st.Entries), s.slotBudget())
		}
	}
	for _, k := range st.Keys {
		if in.keys[k.Index] != nil {
			return RejectMalformed, fmt.Errorf("key index %d defined twice", k.Index)
		}
		ks, err := s.peerKey(k.Name)
		if err != nil {
			return RejectTooManyKeys, err
		}
		in.keys[k.Index] = &inKey{rk: &wire.RemoteKey{Name: k.Name, Kind: k.Codec, Fields: k.Fields}, ks: ks}
	}
	for _, e := range st.Entries {
		k := in.keys[e.Key]
		if k == nil {
			return RejectMalformed, errUndefined
		}
		if e.Index > uint64(s.o.MaxEntries) {
			return RejectTooManyEntries, fmt.Errorf("entry index %d: more entries than maxEntries (%d)", e.Index, s.o.MaxEntries)
		}
		i := int(e.Index)
		if i >= len(in.entries) {
			in.entries = append(in.entries, make([]inEntry, i+1-len(in.entries))...)
		}
		if in.entries[i].sl == nil {
			in.live++
		}
		in.entries[i] = inEntry{key: k, sl: s.slotFor(k.ks, e.Endpoint, true)}
	}
	// Decode first, outside the lock: Get finds the values decoded.
	at := now.UnixNano()
	decoded := in.decoded[:0]
	undecodable := 0
	for _, v := range st.Values {
		e := in.entry(v.Entry)
		if e == nil {
			return RejectMalformed, errUndefined
		}
		p := &peerValue{gen: gen, at: at, key: e.key}
		if lc := e.key.ks.codec.Load(); lc != nil {
			if p.v, p.err = decodeAs(e.key, lc, v.Data); p.err != nil {
				undecodable++
				s.logUndecodable(rec.id, e.key.rk.Name, p.err)
			}
		} else {
			p.raw = append([]byte(nil), v.Data...)
		}
		decoded = append(decoded, p)
	}
	s.m.rejections.WithLabelValues(RejectUndecodable).Add(float64(undecodable))
	s.slotsMu.RLock()
	for i, v := range st.Values {
		e := in.entry(v.Entry)
		if l := s.layout.Load(); e.c == nil || e.layout != l {
			// Cells moved (grown) or the slot went (swept, deleted) since: look again.
			if e.sl.removed.Load() {
				s.slotsMu.RUnlock()
				e.sl = s.slotFor(e.key.ks, e.sl.endpoint, true)
				s.slotsMu.RLock()
			}
			e.c, e.layout = e.sl.cell(rec.idx), s.layout.Load()
		}
		p := decoded[i]
		e.c.Store(p)
		if p.raw != nil {
			if lc := e.key.ks.codec.Load(); lc != nil {
				// The key got its local type meanwhile (decodeKey may have passed
				// this cell already): decode it here.
				s.decodeCell(e.c, p, lc)
			}
		}
	}
	for _, idx := range st.Deletes {
		e := in.entry(idx)
		if e == nil {
			s.slotsMu.RUnlock()
			return RejectMalformed, errUndefined
		}
		if !e.sl.removed.Load() {
			e.sl.cell(rec.idx).Store(nil)
		}
		*e = inEntry{}
		in.live--
	}
	s.slotsMu.RUnlock()
	clear(decoded)
	in.decoded = decoded[:0]
	rec.lastHeard.Store(now.UnixNano())
	rec.entries.Store(int64(in.live))
	if st.Full {
		s.mu.Lock()
		if rec.in == in {
			if old := rec.valid.Swap(gen); old != 0 && old != gen {
				// The peer's earlier state (a previous connection) is replaced whole.
				s.m.expired.WithLabelValues(causeReplaced).Add(float64(rec.counted))
			}
			rec.counted = in.live
			s.publishMembersLocked()
		}
		s.mu.Unlock()
	} else if rec.valid.Load() == gen {
		s.mu.Lock()
		rec.counted = in.live
		s.mu.Unlock()
	}
	return "", nil
}

// decodeCell replaces p, a value kept as the peer's bytes, by its decoding as lc,
// unless the cell moved on meanwhile.
func (s *Syncer) decodeCell(c *cell, p *peerValue, lc *wire.Codec) {
	v, err := decodeAs(p.key, lc, p.raw)
	np := &peerValue{gen: p.gen, at: p.at, key: p.key, v: v, err: err}
	if err != nil {
		np.raw = p.raw
	}
	if c.CompareAndSwap(p, np) && err != nil {
		s.m.rejections.WithLabelValues(RejectUndecodable).Inc()
		s.logUndecodable("", p.key.rk.Name, err)
	}
}

// decodeKey decodes the peers' values of k that arrived before this replica's first
// value of it gave the key its local type lc.
func (s *Syncer) decodeKey(k *keyState, lc *wire.Codec) {
	s.slotsMu.RLock()
	defer s.slotsMu.RUnlock()
	k.slots.Range(func(_, v any) bool {
		cells := *v.(*slot).cells.Load()
		for i := range cells {
			if p := cells[i].Load(); p != nil && p.raw != nil && p.v == nil && p.err == nil {
				s.decodeCell(&cells[i], p, lc)
			}
		}
		return true
	})
}

// logUndecodable logs a value that does not decode (at most once a second).
func (s *Syncer) logUndecodable(peer, key string, err error) {
	if s.m.rateLimit(RejectUndecodable, s.o.now()) {
		s.log.Info("a peer's value does not decode as this replica's type of its key; left out", "reason", RejectUndecodable, "peer", peer, "key", key, "error", err.Error())
	}
}
