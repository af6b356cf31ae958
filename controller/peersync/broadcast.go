package peersync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// Defaults of BroadcastOptions.
const (
	DefaultBroadcastWindow          = 10 * time.Millisecond
	DefaultBroadcastMaxMessageBytes = 64 << 10
)

// maxBroadcastFrameBytes bounds one frame of a window's messages, so that the
// pushes of the interval go between the frames of a large window.
const maxBroadcastFrameBytes = 256 << 10

// MessageKind says how a message of a broadcast reached this replica.
type MessageKind uint8

const (
	// Live: the peer published it to every peer (Publish).
	Live MessageKind = iota
	// Direct: the peer sent it to this replica alone (SendTo): a request of its
	// own, or its answer to one of this replica's.
	Direct
)

func (k MessageKind) String() string {
	return [...]string{"live", "direct"}[k]
}

// Message is one message of a broadcast, as ReceiveMessage takes it.
type Message struct {
	// Peer is the replica that sent it.
	Peer string
	// Data is valid only during the call.
	Data []byte
	Kind MessageKind
}

// RejectError, returned by a broadcast's receiver, refuses what the peer sent with
// its own reason (the rejections_total label): the peer's connection is closed, as
// for any error, and the reason counted instead of malformed.
type RejectError struct {
	Reason string
	Err    error
}

func (e *RejectError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *RejectError) Unwrap() error { return e.Err }

// BroadcastOptions configure a Broadcast.
type BroadcastOptions struct {
	// Window: what is published within it goes to every peer in one frame
	// (default DefaultBroadcastWindow). The windows are the intervals of a grid of
	// this period on the wall clock, the same on every replica, so that the peers'
	// frames of a window arrive together: a message waits at most the window, half
	// of it on average.
	Window time.Duration
	// MaxMessageBytes bounds one message, sent or received (default
	// DefaultBroadcastMaxMessageBytes); a larger one received is malformed.
	MaxMessageBytes int
	// Receive takes each message a peer published (from the peer's connection: one
	// peer at a time per connection, any number of peers at once). msg is valid
	// only during the call. ReceiveMessage, if set, takes them instead, with the
	// messages sent to this replica alone.
	//
	// A receiver's error refuses what the peer sent: the connection is closed and
	// the refusal counted, as malformed or by the reason of a *RejectError. A
	// message that costs its receiver more than its bytes is an error, not a
	// message to skip: every byte a peer sends is charged to its budget
	// (Options.PeerBudget), and nothing else bounds what it costs.
	Receive func(peer string, msg []byte) error
	// ReceiveMessage, if set, takes every message in place of Receive, with how
	// it came (Message.Kind): the peers' published messages and the ones they sent
	// to this replica alone (SendTo).
	ReceiveMessage func(Message) error
	// Connected, if set, is called (in a goroutine of its own) each time this
	// replica is connected to a peer both ways again, its own connection taking
	// the broadcast: a consumer that repairs what a connection gap lost starts
	// there (the peer's answers come on the peer's connection).
	Connected func(peer string)
}

// Broadcast carries a consumer's own messages to every peer over the syncer's
// connections, under the same admission, TLS, bounds, budget and metrics as its
// state, and within a short window rather than once per interval: what a peer
// should know before the next request does (where a request was routed, say).
// Messages are opaque: the consumer encodes them.
//
// Delivery is what the connections give: a message published while a peer is not
// connected, or reads too slowly for its queue, is not sent to it (counted as
// skipped). A consumer that needs every peer to hold what it published repairs
// that itself, with messages to one peer (SendTo) when a connection comes up
// (BroadcastOptions.Connected) and from time to time: what the consumer holds is
// the thing to compare, not a log of what was sent. Every connection has its own
// queue and writer, so a slow peer never delays another one's frames.
type Broadcast struct {
	s    *Syncer
	name string
	o    BroadcastOptions

	mu      sync.Mutex
	pending [][]byte
	armed   bool

	sent     atomic.Uint64
	received atomic.Uint64

	peers sync.Map // peer -> *broadcastPeer: the per-peer metrics

	// framesSent and framesReceived are the broadcast's series of
	// epp_peer_sync_broadcast_frames_total, looked up once: each frame counts.
	framesSent, framesReceived prometheus.Counter
}

// Broadcast registers the broadcast name (unique per syncer; any time, before or
// while Run runs) and returns it. Its peers must register the same name to take
// its messages: a peer without it counts them as unknown-broadcast.
func (s *Syncer) Broadcast(name string, o BroadcastOptions) (*Broadcast, error) {
	if name == "" || len(name) > 64 {
		return nil, fmt.Errorf("peersync: broadcast name %q: want 1 to 64 bytes", name)
	}
	if o.Receive == nil && o.ReceiveMessage == nil {
		return nil, fmt.Errorf("peersync: broadcast %s: Receive (or ReceiveMessage) is required", name)
	}
	setDefault(&o.Window, DefaultBroadcastWindow)
	setDefault(&o.MaxMessageBytes, DefaultBroadcastMaxMessageBytes)
	if o.Window < time.Millisecond || o.MaxMessageBytes < 16 || o.MaxMessageBytes > min(s.o.MaxMessageBytes/2, maxBroadcastFrameBytes) {
		return nil, fmt.Errorf("peersync: broadcast %s: window %v (at least 1ms), maxMessageBytes %d (16 to %d)",
			name, o.Window, o.MaxMessageBytes, min(s.o.MaxMessageBytes/2, maxBroadcastFrameBytes))
	}
	b := &Broadcast{s: s, name: name, o: o,
		framesSent: s.m.broadcastMessages.WithLabelValues(name, "sent"), framesReceived: s.m.broadcastMessages.WithLabelValues(name, "received")}
	if _, loaded := s.broadcasts.LoadOrStore(name, b); loaded {
		return nil, fmt.Errorf("peersync: broadcast %s registered twice", name)
	}
	return b, nil
}

// Name is the broadcast's name.
func (b *Broadcast) Name() string { return b.name }

// Publish sends msg to every peer, within the window. msg is copied. A message
// over MaxMessageBytes, or under wire's least size, is not sent (counted as
// unsendable).
func (b *Broadcast) Publish(msg []byte) {
	if len(msg) > b.o.MaxMessageBytes || len(msg) < wire.MinBroadcastMessageBytes {
		b.s.m.unsendable.Inc()
		return
	}
	b.mu.Lock()
	b.pending = append(b.pending, append([]byte(nil), msg...))
	arm := !b.armed
	b.armed = true
	b.mu.Unlock()
	if arm {
		time.AfterFunc(b.untilFlush(), b.flush)
	}
}

// untilFlush is how long a window that opens now waits for its flush, by this
// replica's clock (Options.ClockOffset).
func (b *Broadcast) untilFlush() time.Duration {
	now := b.s.o.now().Add(b.s.o.ClockOffset)
	return b.flushAt(now).Sub(now)
}

// flushAt is when a window that opens at now is flushed: at the end of its interval
// of a grid of the window's period on the wall clock, the same on every replica, so
// that the frames its peers flush in the same interval reach a replica together
// and wake it once (docs/DECISIONS.md, "Capacity of active-active replicas"). With
// a read tick, the grid is the ticks', when this replica and its peers read
// (Options.ReadTick).
func (b *Broadcast) flushAt(now time.Time) time.Time {
	grid := b.o.Window
	if tick := b.s.o.ReadTick; tick > 0 && tick <= grid {
		grid = tick
	}
	return nextTick(now, grid)
}

// flush queues what was published in the window on every peer's connection, as
// frames within maxBroadcastFrameBytes.
func (b *Broadcast) flush() {
	b.mu.Lock()
	msgs := b.pending
	b.pending, b.armed = nil, false
	b.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	s := b.s
	s.mu.Lock()
	outs := s.outStreams()
	s.mu.Unlock()

	var frames [][]byte
	for len(msgs) > 0 {
		n, size := 0, 0
		for n < len(msgs) && (n == 0 || size+len(msgs[n])+8 <= maxBroadcastFrameBytes) {
			size += len(msgs[n]) + 8
			n++
		}
		frames = append(frames, wire.AppendBroadcast(nil, 0, b.name, msgs[:n]))
		b.sent.Add(uint64(n))
		msgs = msgs[n:]
	}
	b.framesSent.Add(float64(len(frames)))
	for _, o := range outs {
		c := o.conn.Load()
		pc := b.peerCounters(o.peer.ID())
		if c == nil || !c.broadcasts.Load() {
			pc.skipped.Add(float64(len(frames)))
			continue
		}
		for _, f := range frames {
			if !c.q.put(queued{frame: f, kind: kindBroadcast, b: b}, false) {
				pc.skipped.Inc() // the peer reads too slowly
			}
		}
	}
}

// Errors of SendTo.
var (
	// ErrNotConnected: this replica has no connection to the peer that takes the
	// broadcast (not a member, not connected yet, or of a version without it).
	ErrNotConnected = errors.New("no connection to the peer that takes the broadcast")
	// ErrOverBudget: the message would take the peer over its budget; its
	// connections were closed (Options.PeerBudget).
	ErrOverBudget = errors.New("over the peer's budget: its connections were closed")
)

// SendTo sends msg to peer alone (a request of this replica's, or its answer to
// one of the peer's), on this replica's connection to it, as soon as its queue has
// room: it waits for room until ctx ends or the connection does. msg is copied.
// What it sends is charged to the peer's budget, as is everything the peer sends:
// a peer that asks for more than its budget allows is cut off (ErrOverBudget), so
// that what one peer can make this replica send is bounded whatever it asks.
func (b *Broadcast) SendTo(ctx context.Context, peer string, msg []byte) error {
	if len(msg) > b.o.MaxMessageBytes || len(msg) < wire.MinBroadcastMessageBytes {
		return fmt.Errorf("peersync: broadcast %s: a message of %d bytes (want %d to %d)", b.name, len(msg), wire.MinBroadcastMessageBytes, b.o.MaxMessageBytes)
	}
	s := b.s
	s.mu.Lock()
	rec := s.peers[peer]
	var o *outStream
	if rec != nil {
		o = rec.out
	}
	s.mu.Unlock()
	if o == nil {
		return ErrNotConnected
	}
	c := o.conn.Load()
	if c == nil || !c.broadcasts.Load() {
		return ErrNotConnected
	}
	f := wire.AppendBroadcast(nil, wire.BroadcastDirect, b.name, [][]byte{msg})
	if !s.charge(rec, len(f)) {
		return ErrOverBudget
	}
	if !c.q.putWhenRoom(ctx, queued{frame: f, kind: kindBroadcast, b: b, direct: true}, c.broken) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrNotConnected
	}
	b.peerCounters(peer).directSent.Add(float64(len(f)))
	return nil
}

// Peers are the peers this replica is connected to both ways now, its own
// connection taking the broadcast: those that can take a message and answer it.
func (b *Broadcast) Peers() []string {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, rec := range s.peers {
		if c := rec.out.conn.Load(); c != nil && c.broadcasts.Load() && rec.in != nil {
			out = append(out, id)
		}
	}
	return out
}

// Stats are the messages published and received.
func (b *Broadcast) Stats() (sent, received uint64) { return b.sent.Load(), b.received.Load() }

// connectedBothWays runs when either of this replica's connections with peer comes
// up (its own taking broadcasts, or the peer's admitted): when both are up, each
// broadcast's consumer hears of it, once for the pair of connections, whichever
// side came up last and however the two sides' goroutines interleave.
func (s *Syncer) connectedBothWays(peer string) {
	s.mu.Lock()
	rec := s.peers[peer]
	if rec == nil || rec.in == nil || rec.out == nil {
		s.mu.Unlock()
		return
	}
	c := rec.out.conn.Load()
	if c == nil || !c.broadcasts.Load() || (rec.upIn == rec.in && rec.upOut == c) {
		s.mu.Unlock()
		return
	}
	rec.upIn, rec.upOut = rec.in, c
	s.mu.Unlock()
	s.broadcasts.Range(func(_, v any) bool {
		if b := v.(*Broadcast); b.o.Connected != nil {
			go b.o.Connected(peer)
		}
		return true
	})
}

// receiveBroadcast takes a Broadcast frame of in's peer. An error (with its
// reason) closes the connection.
func (s *Syncer) receiveBroadcast(in *inStream, body []byte) (string, error) {
	f := &in.broadcast
	if err := wire.ParseBroadcastInto(f, body, wire.Limits{MaxValueBytes: s.o.MaxMessageBytes, MaxNameBytes: 64}); err != nil {
		return RejectMalformed, err
	}
	v, ok := s.broadcasts.Load(f.Name)
	if !ok {
		s.reject(RejectUnknownBroadcast, "a message of a broadcast this replica does not have; left out", "peer", in.rec.id, "broadcast", f.Name)
		return "", nil
	}
	b := v.(*Broadcast)
	peer := in.rec.id
	b.framesReceived.Inc()
	kind := Live
	if f.Flags&wire.BroadcastDirect != 0 {
		kind = Direct
		b.peerCounters(peer).directReceived.Add(float64(len(body)))
	}
	for m, ok := f.Next(); ok; m, ok = f.Next() {
		if len(m) > b.o.MaxMessageBytes {
			return RejectOversized, fmt.Errorf("broadcast %s: a message of %d bytes, over %d", b.name, len(m), b.o.MaxMessageBytes)
		}
		var err error
		switch {
		case b.o.ReceiveMessage != nil:
			err = b.o.ReceiveMessage(Message{Peer: peer, Data: m, Kind: kind})
		case kind == Live:
			err = b.o.Receive(peer, m)
		}
		if err != nil {
			var re *RejectError
			if errors.As(err, &re) {
				return re.Reason, fmt.Errorf("broadcast %s: %w", b.name, err)
			}
			return RejectMalformed, fmt.Errorf("broadcast %s: %w", b.name, err)
		}
		b.received.Add(1)
	}
	return "", nil
}

// broadcastPeer is one peer's counters of one broadcast.
type broadcastPeer struct {
	delivered, skipped, directSent, directReceived prometheus.Counter
}

// peerCounters returns peer's counters of b (created on first use; forgetPeer
// drops them).
func (b *Broadcast) peerCounters(peer string) *broadcastPeer {
	if v, ok := b.peers.Load(peer); ok {
		return v.(*broadcastPeer)
	}
	m := b.s.m
	frames := m.broadcastPeerFrames.MustCurryWith(prometheus.Labels{"broadcast": b.name, "peer": peer})
	direct := m.broadcastDirectBytes.MustCurryWith(prometheus.Labels{"broadcast": b.name, "peer": peer})
	bp := &broadcastPeer{
		delivered: frames.WithLabelValues("delivered"), skipped: frames.WithLabelValues("skipped"),
		directSent: direct.WithLabelValues("sent"), directReceived: direct.WithLabelValues("received"),
	}
	v, _ := b.peers.LoadOrStore(peer, bp)
	return v.(*broadcastPeer)
}

// forgetPeer drops b's metric series of peer: it left the membership.
func (b *Broadcast) forgetPeer(peer string) {
	if _, ok := b.peers.LoadAndDelete(peer); ok {
		l := prometheus.Labels{"broadcast": b.name, "peer": peer}
		b.s.m.broadcastPeerFrames.DeletePartialMatch(l)
		b.s.m.broadcastDirectBytes.DeletePartialMatch(l)
	}
}
