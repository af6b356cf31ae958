package peersync

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// localEntry is what the push loop knows of one (key, endpoint) this replica set.
type localEntry struct {
	index    uint64 // on the wire: assigned by the push loop when it first sends it
	key      *keyState
	endpoint string
	slot     *slot
	deleted  atomic.Bool

	// The push loop's own.
	defined   bool
	lastVer   uint64 // the slot's localVer last encoded
	lastBytes []byte
}

// pushState is the push loop's: the keys and entries defined on the wire, in index
// order.
type pushState struct {
	seq       uint64
	nextIndex uint64   // the next entry index never used
	free      []uint64 // entry indexes whose deletion was sent: reused from the next tick on, so a peer's index space stays as large as the live entries
	keys      []*keyState
	live      []*localEntry
	scratch   []byte
	tooLarge  map[string]bool // keys whose oversized values were logged
	lastSweep time.Time
}

// sweepEvery is how often slots that hold nothing are removed.
const sweepEvery = 10 * time.Second

// pushLoop pushes once per interval until ctx ends.
func (s *Syncer) pushLoop(ctx context.Context) {
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.tick()
		}
	}
}

// tick builds this interval's delta once, and a full state if a connection needs
// one, and hands them to every connection.
func (s *Syncer) tick() {
	now := s.o.now()
	s.clock.Store(now.UnixNano())
	p := &s.push
	s.mu.Lock()
	added, deleted := s.pendingNew, s.pendingDel
	s.pendingNew, s.pendingDel = nil, nil
	outs := s.outStreams()
	s.mu.Unlock()

	p.seq++
	delta := wire.State{Seq: p.seq}
	for _, e := range added {
		if e.deleted.Load() {
			continue
		}
		if !e.key.defined {
			e.key.defined = true
			e.key.index = uint64(len(p.keys)) + 1
			p.keys = append(p.keys, e.key)
			delta.Keys = append(delta.Keys, keyDefOf(e.key))
		}
		e.defined = true
		if n := len(p.free); n > 0 {
			e.index = p.free[n-1]
			p.free = p.free[:n-1]
		} else {
			p.nextIndex++
			e.index = p.nextIndex
		}
		p.live = append(p.live, e)
		delta.Entries = append(delta.Entries, wire.EntryDef{Index: e.index, Key: e.key.index, Endpoint: e.endpoint})
	}
	if len(deleted) > 0 {
		for _, e := range deleted {
			if e.defined {
				delta.Deletes = append(delta.Deletes, e.index)
			}
		}
		slices.Sort(delta.Deletes)
		delta.Deletes = slices.Compact(delta.Deletes)
		p.live = slices.DeleteFunc(p.live, func(e *localEntry) bool { return e.deleted.Load() })
	}
	for _, e := range p.live {
		ver := e.slot.localVer.Load()
		if ver == 0 || ver == e.lastVer {
			continue
		}
		e.lastVer = ver
		b := e.slot.local.Load()
		enc, err := e.key.codec.Load().Encode(p.scratch[:0], b)
		p.scratch = enc[:0]
		if err == nil && len(enc) > s.o.MaxValueBytes {
			err = fmt.Errorf("%d bytes, over maxValueBytes %d", len(enc), s.o.MaxValueBytes)
		}
		if err != nil {
			s.m.unsendable.Inc()
			if p.tooLarge == nil {
				p.tooLarge = map[string]bool{}
			}
			if !p.tooLarge[e.key.name] {
				p.tooLarge[e.key.name] = true
				s.log.Error(err, "a value of this key cannot be sent to peers (logged once per key)", "key", e.key.name, "endpoint", e.endpoint)
			}
			continue
		}
		if bytes.Equal(enc, e.lastBytes) {
			continue
		}
		// The frame copies it before the next tick can change it.
		e.lastBytes = append(e.lastBytes[:0], enc...)
		delta.Values = append(delta.Values, wire.ValueDef{Entry: e.index, Data: e.lastBytes})
	}
	slices.SortFunc(delta.Values, func(a, b wire.ValueDef) int { return cmp.Compare(a.Entry, b.Entry) })
	deltaFrame := wire.AppendState(nil, &delta)
	var fullFrame []byte
	for _, o := range outs {
		c := o.conn.Load()
		if c == nil {
			continue
		}
		frame, full := deltaFrame, !c.inSync.Load()
		if full {
			if fullFrame == nil {
				fullFrame = s.fullState(p.seq)
			}
			frame = fullFrame
		}
		o.push(s, c, frame, full, now)
	}
	// The deleted indexes may be defined again from the next delta on: every peer
	// in step has this one's deletion first.
	p.free = append(p.free, delta.Deletes...)
	if now.Sub(p.lastSweep) > sweepEvery {
		p.lastSweep = now
		if n := s.sweep(); n > 0 {
			s.log.V(1).Info("swept slots that hold nothing", "slots", n)
		}
	}
}

func keyDefOf(k *keyState) wire.KeyDef {
	c := k.codec.Load()
	return wire.KeyDef{Index: k.index, Name: k.name, Codec: c.Kind, Fields: c.Fields}
}

// fullState is every live key, entry and value, as one frame.
func (s *Syncer) fullState(seq uint64) []byte {
	p := &s.push
	full := wire.State{Full: true, Seq: seq}
	for _, k := range p.keys {
		full.Keys = append(full.Keys, keyDefOf(k))
	}
	for _, e := range p.live {
		full.Entries = append(full.Entries, wire.EntryDef{Index: e.index, Key: e.key.index, Endpoint: e.endpoint})
		if e.lastBytes != nil {
			full.Values = append(full.Values, wire.ValueDef{Entry: e.index, Data: e.lastBytes})
		}
	}
	slices.SortFunc(full.Values, func(a, b wire.ValueDef) int { return cmp.Compare(a.Entry, b.Entry) })
	return wire.AppendState(nil, &full)
}

// outStream pushes to one peer: its goroutine keeps a connection (dial, banner,
// hello, and a read that sees the peer close it), and the push loop writes each
// interval's frame to it directly, with a deadline, so that a push costs one write
// and no goroutine hand-off. A write that fails or does not fit in the deadline (the
// peer is not reading: its socket buffer is full) ends the connection, and the next
// one starts from a full state.
type outStream struct {
	peer   peers.PeerMetadata
	conn   atomic.Pointer[outConn] // the connection in use, nil while there is none
	cancel context.CancelFunc
	done   chan struct{}
	// wake ends a wait between dials: the peer just connected to this replica, so it
	// is up (a replica that starts is dialed at once by the peers that were waiting
	// for it, not after their backoff).
	wake chan struct{}

	lastError atomic.Pointer[string]
}

// up tells o's dial loop that its peer is up (wake).
func (o *outStream) up() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// outConn is one connection to the peer. Every frame written to it goes through
// its queue and its writer goroutine (sendQueue, writeLoop).
type outConn struct {
	c      net.Conn
	inSync atomic.Bool   // its full state is queued: the push loop sends deltas now
	broken chan struct{} // closed when a write failed or the connection ended
	once   sync.Once
	// broadcasts: the peer takes Broadcast frames (its features line said so).
	broadcasts atomic.Bool
	q          *sendQueue
}

func (c *outConn) fail() { c.once.Do(func() { close(c.broken) }) }

// fail ends the connection c after err (the next one starts from a full state).
func (o *outStream) fail(s *Syncer, c *outConn, err error) {
	o.failed(s, err)
	o.conn.CompareAndSwap(c, nil)
	c.fail()
}

// errSlowPeer ends a connection whose queue cannot take the interval's push.
var errSlowPeer = errors.New("the peer reads too slowly: its queue of frames to write is full")

// push queues the interval's frame on c (the push loop's goroutine); a peer whose
// queue is full is too slow for the deltas, and its connection starts again.
func (o *outStream) push(s *Syncer, c *outConn, frame []byte, full bool, built time.Time) {
	if !c.q.put(queued{frame: frame, kind: kindState, built: built}, false) {
		s.m.dropped.Inc()
		o.fail(s, c, errSlowPeer)
		return
	}
	if full {
		c.inSync.Store(true)
		s.m.fullStates.Inc()
	}
}

// failed records a failure to connect or to push: the peer's last error (in the
// document) and the metric, by the reason it returns.
func (o *outStream) failed(s *Syncer, err error) string {
	reason := connectReason(err)
	s.m.connectErrors.WithLabelValues(reason).Inc()
	msg := err.Error()
	o.lastError.Store(&msg)
	return reason
}

// run keeps a connection to the peer until ctx ends.
func (o *outStream) run(ctx context.Context, s *Syncer) {
	defer close(o.done)
	backoff := time.Duration(0)
	logged := ""
	for ctx.Err() == nil {
		if !s.awaitSelfListed(ctx, o) {
			return
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff/2 + rand.N(backoff/2+1)):
			case <-o.wake:
			}
		}
		// A connection, or a dial, ends when this replica's discovery stops listing
		// it (terminating, not ready): its peers no longer accept it.
		lctx, unlisted := s.whileListed(ctx)
		conn, err := s.connect(lctx, o.peer)
		if err != nil {
			ended := lctx.Err() != nil // unlisted, or stopping
			unlisted()
			if ended {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if reason := o.failed(s, err); logged != reason {
				logged = reason
				s.log.Info("cannot push to peer; retrying", "peer", o.peer.ID(), "address", o.peer.HostPort(), "reason", reason, "error", err.Error())
			}
			backoff = nextBackoff(backoff)
			continue
		}
		if logged != "" {
			s.log.Info("pushing to peer again", "peer", o.peer.ID())
			logged = ""
		}
		o.lastError.Store(nil)
		backoff = 0
		if o.hold(lctx, s, conn) {
			backoff = nextBackoff(0)
		}
		unlisted()
	}
}

// whileListed is ctx, ended too when this replica's discovery stops listing it
// (Options.SelfListed).
func (s *Syncer) whileListed(ctx context.Context) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancel(ctx)
	if s.o.SelfListed == nil {
		return lctx, cancel
	}
	go func() {
		for {
			listed, changed := s.o.SelfListed()
			if !listed {
				cancel()
				return
			}
			select {
			case <-lctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return lctx, cancel
}

// hold hands conn to the push loop and waits until it breaks, the peer closes it or
// ctx ends; it reports whether the connection failed.
func (o *outStream) hold(ctx context.Context, s *Syncer, conn net.Conn) bool {
	c := &outConn{c: conn, broken: make(chan struct{}), q: newSendQueue(DefaultSendQueueBytes)}
	o.conn.Store(c) // before the peer's features are read: connectedBothWays finds it
	closed := make(chan struct{})
	go func() {
		// After its banner the peer writes its features line, if any, and nothing
		// more: EOF or an error means it closed.
		br := bufio.NewReaderSize(conn, 256)
		if line, err := br.ReadString('\n'); err == nil {
			if fs, ok := wire.ParseFeaturesLine(line); ok && slices.Contains(fs, wire.FeatureExchange) {
				c.broadcasts.Store(true)
				s.connectedBothWays(o.peer.ID())
			}
		}
		_, _ = io.Copy(io.Discard, br)
		close(closed)
	}()
	wrote := make(chan struct{})
	go func() { defer close(wrote); o.writeLoop(s, c) }()
	defer func() {
		o.conn.CompareAndSwap(c, nil)
		c.fail()
		conn.Close()
		<-closed
		<-wrote
	}()
	select {
	case <-ctx.Done():
		return false
	case <-c.broken:
		return true
	case <-closed:
		msg := "the peer closed the connection"
		o.lastError.Store(&msg)
		return true
	}
}

// notListed is the outbound error while this replica's discovery does not list it.
const notListed = "not pushing: this replica's discovery does not list it as a member yet (its peers would refuse it)"

// awaitSelfListed waits until this replica's discovery lists it (Options.SelfListed),
// reporting false when ctx ends first.
func (s *Syncer) awaitSelfListed(ctx context.Context, o *outStream) bool {
	if s.o.SelfListed == nil {
		return true
	}
	for {
		listed, changed := s.o.SelfListed()
		if listed {
			return true
		}
		msg := notListed
		o.lastError.Store(&msg)
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// maxBackoff bounds the wait between two dials of a peer: once a fault heals (a
// network partition, a frozen peer that resumes), the connection, and the frames
// it missed, come back within about that. A dial that fails costs a SYN.
const maxBackoff = time.Second

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return 100 * time.Millisecond
	}
	return min(2*d, maxBackoff)
}

// connect dials the peer, checks its banner names it, and sends the preface and
// hello. The banner may take the peer's handshake timeout to come: a peer holds a
// connection from an address its discovery does not list yet until it does.
func (s *Syncer) connect(ctx context.Context, p peers.PeerMetadata) (net.Conn, error) {
	timeout := min(time.Second, s.o.TTL)
	banner := s.o.HandshakeTimeout + timeout
	d := net.Dialer{Timeout: timeout}
	if s.o.SourceAddress != nil {
		if ip := s.o.SourceAddress(p); ip != nil {
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}
	conn, err := d.DialContext(ctx, "tcp", p.HostPort())
	if err != nil {
		return nil, err
	}
	// The banner may wait for the peer's discovery: ctx ending ends the wait.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if s.o.TLS != nil {
		cfg, err := s.o.TLS.clientConfig()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls: %w", err)
		}
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, banner)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err == nil && s.o.TLS.RequireReplicaName {
			err = s.o.TLS.namesReplica(tc.ConnectionState(), p.Namespace, p.Name)
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls: %w", err)
		}
		conn = tc
	}
	_ = conn.SetDeadline(s.o.now().Add(banner))
	line, err := bufio.NewReaderSize(conn, 256).ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("banner: %w", err)
	}
	if want := reachability.AnswerLine(p.ID()); line != want {
		conn.Close()
		return nil, fmt.Errorf("%w: the replica at %s answers %q, want %q", errWrongPeer, p.HostPort(), strings.TrimSuffix(line, "\n"), strings.TrimSuffix(want, "\n"))
	}
	b := append([]byte(wire.Preface), wire.AppendHello(nil, s.hello)...)
	if _, err := conn.Write(b); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

var errWrongPeer = errors.New("wrong peer")

// connectReason names a failure to push, for the metrics.
func connectReason(err error) string {
	switch {
	case errors.Is(err, errWrongPeer):
		return "wrong-peer"
	case strings.HasPrefix(err.Error(), "tls:"):
		return "tls"
	case strings.HasPrefix(err.Error(), "banner:"):
		return "banner"
	case isTimeout(err):
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "refused"
	case strings.Contains(err.Error(), "connection reset"), strings.Contains(err.Error(), "broken pipe"):
		return "reset"
	}
	return "other"
}
