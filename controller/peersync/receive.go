package peersync

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// Reasons a peer's connection or message is refused, in the rejections_total metric.
const (
	RejectUnknownSource    = "unknown-source"    // the source address is no peer's
	RejectIdentity         = "identity"          // the hello names another replica than the peer at that address
	RejectStaleIncarnation = "stale-incarnation" // an older run of the peer's process than one already connected
	RejectPreface          = "preface"           // not this protocol
	RejectTLS              = "tls"               // the TLS handshake failed
	RejectOversized        = "oversized"         // a message over maxMessageBytes
	RejectValueTooLarge    = "value-too-large"   // a value over maxValueBytes (the rest of the message is kept)
	RejectMalformed        = "malformed"         // a message that does not decode, or refers to what it never defined
	RejectTooManyEntries   = "too-many-entries"  // a peer defining more than maxEntries entries
)

// serve accepts the peers' connections until ctx ends.
func (s *Syncer) serve(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	return reachability.Accept(ctx, s.o.Listener, func(conn net.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, conn)
		}()
	})
}

// inStream is one peer's connection to this replica, and what it defined.
type inStream struct {
	rec     *peerRec
	conn    net.Conn
	hello   wire.Hello
	gen     uint64 // of its latest full state; 0 before one
	keys    map[uint64]*inKey
	entries []inEntry // by entry index (the pusher reuses freed indexes: dense)
	live    int       // entries defined
}

type inKey struct {
	rk *wire.RemoteKey
	ks *keyState
}

type inEntry struct {
	key *inKey
	sl  *slot
	// c is the peer's cell of sl, valid while Syncer.layout is layout: a write
	// touches the cell alone, not the slot (one cache miss instead of two).
	c      *cell
	layout uint64
}

func remoteIP(c net.Conn) string {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return ""
	}
	return ap.Addr().Unmap().String()
}

// serveConn admits a connection only from a peer's address, then applies its
// messages until it ends or stays silent for the TTL.
func (s *Syncer) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	ip := remoteIP(conn)
	if !s.isPeerAddress(ip) {
		s.reject(RejectUnknownSource, "a connection from an address that is no peer's", "address", ip)
		return
	}
	handshake := min(2*time.Second, s.o.TTL+time.Second)
	_ = conn.SetDeadline(s.o.now().Add(handshake))
	if s.o.TLS != nil {
		cfg, err := s.o.TLS.serverConfig()
		if err != nil {
			s.log.Error(err, "mTLS: cannot load the certificates; refusing the peer's connection", "address", ip)
			s.m.rejections.WithLabelValues(RejectTLS).Inc()
			return
		}
		tc := tls.Server(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			if !isClosed(err) {
				s.reject(RejectTLS, "mTLS handshake failed", "address", ip, "error", err.Error())
			}
			return
		}
		conn = tc
	}
	if _, err := io.WriteString(conn, reachability.AnswerLine(s.hello.ID())); err != nil {
		return
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	var pre [len(wire.Preface)]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return // a reachability probe: it connects and leaves
	}
	if string(pre[:]) != wire.Preface {
		s.reject(RejectPreface, "a connection that does not speak this protocol", "address", ip)
		return
	}
	body, err := wire.ReadFrame(br, s.o.MaxMessageBytes)
	if err != nil {
		s.rejectRead(err, ip)
		return
	}
	h, err := wire.ParseHello(body)
	if err != nil {
		s.reject(RejectMalformed, "a malformed hello", "address", ip, "error", err.Error())
		return
	}
	in := &inStream{conn: conn, hello: h}
	rec, reason := s.attach(in, ip)
	if rec == nil {
		s.reject(reason, "refused a peer's connection", "address", ip, "replica", h.ID())
		return
	}
	defer s.detach(in)
	s.m.receivedBytes.Add(float64(len(body) + len(wire.Preface)))
	// One message at a time: its buffer and decoded form are reused (what a message
	// defines is copied out, values into their cells).
	var st wire.State
	var buf []byte
	// The read deadline is the TTL after the last message. It is not moved on every
	// message (it is a timer to move): when it fires early, it is moved to the TTL
	// after the last message, and only a real silence of the TTL expires the peer.
	last := s.o.now()
	_ = conn.SetReadDeadline(last.Add(s.o.TTL))
	for {
		// Wait for a message's first byte: a deadline that fires here has consumed
		// nothing, so the connection can go on.
		if _, err := br.Peek(1); err != nil {
			if isTimeout(err) {
				if s.o.now().Sub(last) < s.o.TTL {
					_ = conn.SetReadDeadline(last.Add(s.o.TTL))
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
		body, err := wire.ReadFrameInto(br, s.o.MaxMessageBytes, buf)
		if err != nil {
			if isTimeout(err) {
				s.expire(in, causeTTL) // silent in the middle of a message
				return
			}
			if !isClosed(err) {
				s.rejectRead(err, ip)
			}
			return
		}
		now := s.o.now()
		last = now
		s.m.receivedBytes.Add(float64(len(body)))
		s.m.receivedMessages.Inc()
		buf = body
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
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF)
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

// apply applies one state message of in.
func (s *Syncer) apply(in *inStream, st *wire.State, now time.Time) (string, error) {
	in.rec.applyMu.Lock()
	defer in.rec.applyMu.Unlock()
	if in.rec.current.Load() != in {
		return "", nil // replaced by a newer connection, or the peer was removed: its writes are over
	}
	if st.Full {
		in.gen = s.gen.Add(1)
		in.keys = map[uint64]*inKey{}
		in.entries, in.live = in.entries[:0], 0
	} else if in.gen == 0 {
		return RejectMalformed, errors.New("a delta before any full state")
	}
	for _, k := range st.Keys {
		in.keys[k.Index] = &inKey{rk: &wire.RemoteKey{Name: k.Name, Kind: k.Codec, Fields: k.Fields}, ks: s.keyFor(k.Name, true)}
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
	rec := in.rec
	at := now.UnixNano()
	s.slotsMu.RLock()
	for _, v := range st.Values {
		e := in.entry(v.Entry)
		if e == nil {
			s.slotsMu.RUnlock()
			return RejectMalformed, errUndefined
		}
		if l := s.layout.Load(); e.c == nil || e.layout != l {
			// Cells moved (grown) or the slot went (swept, deleted) since: look again.
			if e.sl.removed.Load() {
				s.slotsMu.RUnlock()
				e.sl = s.slotFor(e.key.ks, e.sl.endpoint, true)
				s.slotsMu.RLock()
			}
			e.c, e.layout = e.sl.cell(rec.idx), s.layout.Load()
		}
		e.c.write(in.gen, e.key.rk, v.Data, at)
	}
	for _, idx := range st.Deletes {
		e := in.entry(idx)
		if e == nil {
			s.slotsMu.RUnlock()
			return RejectMalformed, errUndefined
		}
		if !e.sl.removed.Load() {
			e.sl.cell(rec.idx).clear()
		}
		*e = inEntry{}
		in.live--
	}
	s.slotsMu.RUnlock()
	rec.lastHeard.Store(now.UnixNano())
	rec.entries.Store(int64(in.live))
	if st.Full {
		s.mu.Lock()
		if rec.in == in {
			if old := rec.valid.Swap(in.gen); old != 0 && old != in.gen {
				// The peer's earlier state (a previous connection) is replaced whole.
				s.m.expired.WithLabelValues(causeReplaced).Add(float64(rec.counted))
			}
			rec.counted = in.live
			s.publishMembersLocked()
		}
		s.mu.Unlock()
	} else if rec.valid.Load() == in.gen {
		s.mu.Lock()
		rec.counted = in.live
		s.mu.Unlock()
	}
	return "", nil
}
