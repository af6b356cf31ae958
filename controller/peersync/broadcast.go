package peersync

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
)

// Defaults of BroadcastOptions.
const (
	DefaultBroadcastWindow          = 10 * time.Millisecond
	DefaultBroadcastMaxMessageBytes = 64 << 10
	// DefaultSnapshotTimeout bounds the wait for a snapshot asked of a peer, and
	// then for each next frame of it (BroadcastOptions.SnapshotTimeout).
	DefaultSnapshotTimeout = 5 * time.Second
)

// notHereWait is how long a replica asked for the snapshot of a broadcast it has not
// registered waits for it before it says so.
const notHereWait = 2 * time.Second

// snapshotChunkBytes bounds one frame of a snapshot, so that the pushes of the
// interval go between its frames.
const snapshotChunkBytes = 256 << 10

// BroadcastOptions configure a Broadcast.
type BroadcastOptions struct {
	// Window: what is published within it goes to every peer in one frame
	// (default DefaultBroadcastWindow). The first message of a window waits at most
	// that long.
	Window time.Duration
	// MaxMessageBytes bounds one message, sent or received (default
	// DefaultBroadcastMaxMessageBytes); a larger one received is a counted
	// rejection (oversized).
	MaxMessageBytes int
	// Receive takes each message a peer published, and each message of a snapshot
	// (from the peer's connection: one peer at a time per connection, any number of
	// peers at once). msg is valid only during the call. An error is a counted
	// rejection (undecodable); the connection goes on.
	Receive func(peer string, msg []byte) error
	// Snapshot, if set, gives a peer that starts what this replica holds, as
	// messages: it calls emit for each one, and stops when emit returns false (the
	// peer went away).
	Snapshot func(emit func(msg []byte) bool)
	// Bootstrap: ask one peer for its snapshot when this replica starts (until one
	// arrives whole; Warm closes then). A replica with no peer once its discovery
	// has its first set is warm at once.
	Bootstrap bool
	// SnapshotTimeout: a peer asked for its snapshot that sends no frame of it for
	// this long (before the first one, or between two) is given up for another peer
	// (default DefaultSnapshotTimeout). A snapshot that goes on arriving is not
	// given up, however long it takes in all.
	SnapshotTimeout time.Duration
}

// Broadcast carries a consumer's own messages to every peer over the syncer's
// connections, under the same admission, TLS, bounds and metrics as its state, and
// within a short window rather than once per interval: what a peer should know
// before the next request does (where a request was routed, say). Messages are
// opaque: the consumer encodes them. A peer that was not connected when a message
// was published never sees it; a replica that starts can ask one peer for a
// snapshot (BroadcastOptions.Bootstrap).
type Broadcast struct {
	s    *Syncer
	name string
	o    BroadcastOptions

	mu      sync.Mutex
	pending [][]byte
	armed   bool

	warm      chan struct{}
	warmOnce  sync.Once
	asked     atomic.Pointer[snapshotAsk] // the peer asked for a snapshot, while one is on its way
	askedOf   sync.Map                    // every peer asked for a snapshot: the end of its snapshot warms, even after it was given up on
	declined  sync.Map                    // peer -> when it said it has no broadcast of the name (asked again after the snapshot timeout: it may be starting)
	warmAfter atomic.Int64                // ns from the syncer's start to warm
	sent      atomic.Uint64
	received  atomic.Uint64
}

// snapshotAsk is a snapshot asked of a peer.
type snapshotAsk struct {
	peer  string
	since time.Time
}

// Broadcast registers the broadcast name (unique per syncer; any time, before or
// while Run runs) and returns it. Its peers must register the same name to take
// its messages: a peer without it counts them as unknown-broadcast.
func (s *Syncer) Broadcast(name string, o BroadcastOptions) (*Broadcast, error) {
	if name == "" || len(name) > 64 {
		return nil, fmt.Errorf("peersync: broadcast name %q: want 1 to 64 bytes", name)
	}
	if o.Receive == nil {
		return nil, fmt.Errorf("peersync: broadcast %s: Receive is required", name)
	}
	if o.Window == 0 {
		o.Window = DefaultBroadcastWindow
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultBroadcastMaxMessageBytes
	}
	if o.SnapshotTimeout == 0 {
		o.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if o.Window < time.Millisecond || o.MaxMessageBytes < 16 || o.MaxMessageBytes > min(s.o.MaxMessageBytes/2, snapshotChunkBytes) {
		return nil, fmt.Errorf("peersync: broadcast %s: window %v (at least 1ms), maxMessageBytes %d (16 to %d)", name, o.Window, o.MaxMessageBytes, min(s.o.MaxMessageBytes/2, snapshotChunkBytes))
	}
	b := &Broadcast{s: s, name: name, o: o, warm: make(chan struct{})}
	if !o.Bootstrap {
		b.markWarm()
	}
	if _, loaded := s.broadcasts.LoadOrStore(name, b); loaded {
		return nil, fmt.Errorf("peersync: broadcast %s registered twice", name)
	}
	s.m.broadcastWarm.WithLabelValues(name).Set(0)
	if !o.Bootstrap {
		s.m.broadcastWarm.WithLabelValues(name).Set(1)
	}
	return b, nil
}

// Publish sends msg to every peer connected now, within the window. msg is copied.
// A message over MaxMessageBytes is not sent (counted as unsendable).
func (b *Broadcast) Publish(msg []byte) {
	if len(msg) > b.o.MaxMessageBytes || len(msg) == 0 {
		b.s.m.unsendable.Inc()
		return
	}
	b.mu.Lock()
	b.pending = append(b.pending, append([]byte(nil), msg...))
	arm := !b.armed
	b.armed = true
	b.mu.Unlock()
	if arm {
		time.AfterFunc(b.o.Window, b.flush)
	}
}

// flush writes what was published in the window to every peer that takes it.
func (b *Broadcast) flush() {
	b.mu.Lock()
	msgs := b.pending
	b.pending, b.armed = nil, false
	b.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	var frames [][]byte
	for len(msgs) > 0 { // frames within the message limit
		n, size := 0, 0
		for n < len(msgs) && (n == 0 || size+len(msgs[n])+8 <= snapshotChunkBytes) {
			size += len(msgs[n]) + 8
			n++
		}
		frames = append(frames, wire.AppendBroadcast(nil, 0, b.name, msgs[:n]))
		b.sent.Add(uint64(n))
		msgs = msgs[n:]
	}
	s := b.s
	s.mu.Lock()
	outs := s.outStreams()
	s.mu.Unlock()
	for _, o := range outs {
		c := o.conn.Load()
		if c == nil || !c.broadcasts.Load() {
			continue
		}
		for _, f := range frames {
			if o.write(s, c, f, s.writeBudget()) != nil {
				break
			}
		}
	}
	s.m.broadcastMessages.WithLabelValues(b.name, "sent").Add(float64(len(frames)))
}

// Warm is closed once a peer's snapshot arrived whole (or there was no peer to ask):
// see BroadcastOptions.Bootstrap.
func (b *Broadcast) Warm() <-chan struct{} { return b.warm }

// WarmAfter is how long after the syncer was created the broadcast got warm (0
// while it is not).
func (b *Broadcast) WarmAfter() time.Duration { return time.Duration(b.warmAfter.Load()) }

// Stats are the messages sent and received.
func (b *Broadcast) Stats() (sent, received uint64) { return b.sent.Load(), b.received.Load() }

func (b *Broadcast) markWarm() {
	b.warmOnce.Do(func() {
		after := b.s.o.now().Sub(time.Unix(0, int64(b.s.hello.Start)))
		b.warmAfter.Store(max(int64(after), 1))
		if b.o.Bootstrap {
			b.s.m.broadcastWarm.WithLabelValues(b.name).Set(1)
			b.s.m.broadcastWarmSeconds.WithLabelValues(b.name).Set(after.Seconds())
			b.s.log.Info("broadcast warm", "broadcast", b.name, "after", after.Round(time.Millisecond).String())
		}
		close(b.warm)
	})
}

func (b *Broadcast) isWarm() bool {
	select {
	case <-b.warm:
		return true
	default:
		return false
	}
}

// requestSnapshots asks the peer of c for the snapshot of every broadcast that
// wants one and has asked no other peer (c's peer takes broadcasts).
func (s *Syncer) requestSnapshots(o *outStream, c *outConn) {
	s.broadcasts.Range(func(_, v any) bool {
		b := v.(*Broadcast)
		if !b.o.Bootstrap || b.isWarm() {
			return true
		}
		if at, no := b.declined.Load(o.peer.ID()); no && s.o.now().Sub(at.(time.Time)) < b.o.SnapshotTimeout {
			return true
		}
		ask := &snapshotAsk{peer: o.peer.ID(), since: s.o.now()}
		if !b.asked.CompareAndSwap(nil, ask) {
			return true
		}
		b.askedOf.Store(ask.peer, struct{}{})
		if o.write(s, c, wire.AppendRequest(nil, b.name), time.Second) != nil {
			b.asked.CompareAndSwap(ask, nil)
		}
		return true
	})
}

// checkSnapshots runs each interval: a snapshot asked of a peer that did not send it
// whole in time is asked of another; a replica whose discovery lists no peer is
// warm at once.
func (s *Syncer) checkSnapshots(now time.Time, outs []*outStream) {
	s.broadcasts.Range(func(_, v any) bool {
		b := v.(*Broadcast)
		if !b.o.Bootstrap || b.isWarm() {
			return true
		}
		if len(outs) == 0 && s.peersReady() {
			b.markWarm()
			return true
		}
		last := ""
		if ask := b.asked.Load(); ask != nil {
			if now.Sub(ask.since) < b.o.SnapshotTimeout {
				return true
			}
			b.asked.CompareAndSwap(ask, nil)
			last = ask.peer // too slow: another, if there is one
		}
		for i := range outs {
			o := outs[(i+int(now.UnixNano()))%len(outs)] // not always the same first
			if c := o.conn.Load(); c != nil && c.broadcasts.Load() && (o.peer.ID() != last || len(outs) == 1) {
				s.requestSnapshots(o, c)
				if b.asked.Load() != nil {
					break
				}
			}
		}
		return true
	})
}

// receiveBroadcast takes a Broadcast frame of in's peer.
func (s *Syncer) receiveBroadcast(in *inStream, body []byte) (string, error) {
	var f wire.Broadcast
	if err := wire.ParseBroadcastInto(&f, body, wire.Limits{MaxValueBytes: s.o.MaxMessageBytes, MaxNameBytes: 64}); err != nil {
		return RejectMalformed, err
	}
	v, ok := s.broadcasts.Load(f.Name)
	if !ok {
		s.reject(RejectUnknownBroadcast, "a message of a broadcast this replica does not have; left out", "peer", in.rec.id, "broadcast", f.Name)
		return "", nil
	}
	b := v.(*Broadcast)
	bad := 0
	for _, m := range f.Messages {
		if len(m) > b.o.MaxMessageBytes {
			s.m.rejections.WithLabelValues(RejectOversized).Inc()
			continue
		}
		if err := b.o.Receive(in.rec.id, m); err != nil {
			bad++
			s.logUndecodable(in.rec.id, "broadcast "+f.Name, err)
		}
	}
	s.m.rejections.WithLabelValues(RejectUndecodable).Add(float64(bad))
	b.received.Add(uint64(len(f.Messages)))
	s.m.broadcastMessages.WithLabelValues(b.name, "received").Add(float64(len(f.Messages)))
	if f.Flags&wire.BroadcastSnapshot != 0 {
		b.snapshotFrame(in.rec.id, f.Flags)
	}
	return "", nil
}

// snapshotFrame follows a frame of a snapshot from peer: the end of a snapshot that
// arrived whole warms the broadcast, whichever peer asked it was (one given up on
// may still end first); a frame of the snapshot asked now restarts its timeout, so
// that a snapshot that goes on arriving is never given up.
func (b *Broadcast) snapshotFrame(peer string, flags byte) {
	ask := b.asked.Load()
	current := ask != nil && ask.peer == peer
	switch {
	case flags&wire.BroadcastSnapshotEnd == 0:
		if current {
			b.asked.CompareAndSwap(ask, &snapshotAsk{peer: peer, since: b.s.o.now()})
		}
	case flags&wire.BroadcastNotHere != 0:
		if current {
			b.declined.Store(peer, b.s.o.now())
			b.asked.CompareAndSwap(ask, nil)
		}
	default:
		if _, ok := b.askedOf.Load(peer); ok {
			b.markWarm()
		}
	}
}

// serveSnapshot answers in's peer's Request frame: the broadcast's snapshot, on this
// replica's own connection to that peer (once it has one that takes broadcasts).
func (s *Syncer) serveSnapshot(ctx context.Context, in *inStream, body []byte) (string, error) {
	name, err := wire.ParseRequest(body, wire.Limits{MaxNameBytes: 64})
	if err != nil {
		return RejectMalformed, err
	}
	s.mu.Lock()
	o := in.rec.out
	s.mu.Unlock()
	if o == nil {
		return "", nil
	}
	if !in.rec.snapshotting.CompareAndSwap(false, true) {
		return "", nil // one at a time per peer
	}
	go func() {
		defer in.rec.snapshotting.Store(false)
		// A replica that starts registers its broadcasts a moment after its syncer
		// listens: wait for it a little before saying there is none.
		v, ok := s.broadcasts.Load(name)
		for deadline := time.Now().Add(notHereWait); !ok && time.Now().Before(deadline); v, ok = s.broadcasts.Load(name) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		c := s.awaitBroadcastConn(ctx, o)
		if c == nil {
			return
		}
		if !ok {
			// Nothing of that name here: an empty snapshot, so that the peer asks
			// another.
			_ = o.write(s, c, wire.AppendBroadcast(nil, wire.BroadcastSnapshot|wire.BroadcastSnapshotEnd|wire.BroadcastNotHere, name, nil), time.Second)
			return
		}
		v.(*Broadcast).writeSnapshot(o, c)
	}()
	return "", nil
}

// awaitBroadcastConn waits (up to the snapshot timeout) for o's connection to take
// broadcasts.
func (s *Syncer) awaitBroadcastConn(ctx context.Context, o *outStream) *outConn {
	deadline := time.Now().Add(DefaultSnapshotTimeout)
	for time.Now().Before(deadline) {
		if c := o.conn.Load(); c != nil && c.broadcasts.Load() {
			return c
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.done:
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// writeSnapshot writes the snapshot to c in frames of at most snapshotChunkBytes,
// the last one marked as the end.
func (b *Broadcast) writeSnapshot(o *outStream, c *outConn) {
	s := b.s
	start := s.o.now()
	var msgs [][]byte
	size, total, frames := 0, 0, 0
	var failed error
	send := func(flags byte) {
		f := wire.AppendBroadcast(nil, flags, b.name, msgs)
		if err := o.write(s, c, f, time.Second); err != nil {
			failed = err
		}
		total += len(f)
		frames++
		msgs, size = msgs[:0], 0
	}
	if b.o.Snapshot != nil {
		b.o.Snapshot(func(m []byte) bool {
			if failed != nil {
				return false
			}
			if len(m) == 0 || len(m) > b.o.MaxMessageBytes {
				return true
			}
			if size+len(m)+8 > snapshotChunkBytes {
				send(wire.BroadcastSnapshot)
			}
			msgs = append(msgs, append([]byte(nil), m...))
			size += len(m) + 8
			return failed == nil
		})
	}
	if failed == nil {
		send(wire.BroadcastSnapshot | wire.BroadcastSnapshotEnd)
	}
	if failed != nil {
		s.log.Info("a snapshot could not be sent whole; the peer will ask another", "broadcast", b.name, "peer", o.peer.ID(), "error", failed.Error())
		return
	}
	s.m.broadcastMessages.WithLabelValues(b.name, "snapshot-sent").Add(float64(frames))
	s.log.V(1).Info("sent a snapshot", "broadcast", b.name, "peer", o.peer.ID(), "bytes", total, "took", s.o.now().Sub(start).String())
}
