package peersync

import (
	"context"
	"fmt"
	"slices"
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
	// DefaultSnapshotTimeout bounds the wait for a snapshot asked of a peer, and
	// then for each next frame of it (BroadcastOptions.SnapshotTimeout).
	DefaultSnapshotTimeout = 5 * time.Second
	// DefaultResendBytes bounds the frames a replica keeps to send again to a peer
	// that missed them (BroadcastOptions.ResendBytes).
	DefaultResendBytes = 16 << 20
)

// notHereWait is how long a replica asked for the snapshot of a broadcast it has not
// registered waits for it before it says so.
const notHereWait = 2 * time.Second

// snapshotChunkBytes bounds one frame of a snapshot, so that the pushes of the
// interval go between its frames.
const snapshotChunkBytes = 256 << 10

// MessageKind says how a message of a broadcast reached this replica.
type MessageKind uint8

const (
	// Live: the peer published it now.
	Live MessageKind = iota
	// Resent: the peer published it earlier; this replica missed it (a connection
	// gap) and asked for it again.
	Resent
	// Snapshot: part of the snapshot this replica asked the peer for when it
	// started.
	Snapshot
	// Resync: part of the peer's snapshot, which it sends in place of frames this
	// replica missed and it no longer keeps.
	Resync
)

func (k MessageKind) String() string {
	return [...]string{"live", "resent", "snapshot", "resync"}[k]
}

// Message is one message of a broadcast, as ReceiveMessage takes it.
type Message struct {
	// Peer is the replica that sent it.
	Peer string
	// Data is valid only during the call.
	Data []byte
	Kind MessageKind
}

// BroadcastOptions configure a Broadcast.
type BroadcastOptions struct {
	// Window: what is published within it goes to every peer in one frame
	// (default DefaultBroadcastWindow). The windows are the intervals of a grid of
	// this period on the wall clock, the same on every replica, so that the peers'
	// frames of a window arrive together: a message waits at most the window, half
	// of it on average.
	Window time.Duration
	// MaxMessageBytes bounds one message, sent or received (default
	// DefaultBroadcastMaxMessageBytes); a larger one received is a counted
	// rejection (oversized).
	MaxMessageBytes int
	// Receive takes each message a peer published, and each message of a snapshot
	// (from the peer's connection: one peer at a time per connection, any number of
	// peers at once). msg is valid only during the call. An error is a counted
	// rejection (undecodable); the connection goes on. ReceiveMessage, if set,
	// takes them instead.
	Receive func(peer string, msg []byte) error
	// ReceiveMessage, if set, takes every message in place of Receive, with how it
	// came (Message.Kind): a consumer that trusts a peer's snapshot further than
	// its live messages (a rate limit, say) tells them apart here. Snapshot and
	// Resync messages come only from a peer this replica asked; any other is a
	// counted rejection (unsolicited) and never reaches it.
	ReceiveMessage func(Message) error
	// Snapshot, if set, gives a peer that starts what this replica holds, as
	// messages: it calls emit for each one, and stops when emit returns false (the
	// peer went away). It gives a peer that missed frames no longer kept
	// (ResendBytes) the same, as a resync.
	Snapshot func(emit func(msg []byte) bool)
	// Bootstrap: ask a warm peer for its snapshot when this replica starts, the
	// longest-running first (until one arrives whole; Warm closes then). A replica
	// with no peer once its discovery has its first set, or whose every peer is
	// cold too or does not answer within SnapshotTimeout, is warm at once, empty.
	Bootstrap bool
	// SnapshotTimeout: a peer asked for its snapshot that sends no frame of it for
	// this long (before the first one, or between two) is given up for another peer
	// (default DefaultSnapshotTimeout). A snapshot that goes on arriving is not
	// given up, however long it takes in all.
	SnapshotTimeout time.Duration
	// ResendBytes bounds the frames kept to send again to a peer that missed them
	// (default DefaultResendBytes): a peer that missed more gets a resync.
	ResendBytes int
}

// Broadcast carries a consumer's own messages to every peer over the syncer's
// connections, under the same admission, TLS, bounds and metrics as its state, and
// within a short window rather than once per interval: what a peer should know
// before the next request does (where a request was routed, say). Messages are
// opaque: the consumer encodes them.
//
// Nothing published is lost to a connection gap of any length. Frames carry a
// sequence number per replica process, and each replica keeps its latest frames
// (ResendBytes). A peer tells from the numbers (and from the cursor that starts
// each connection) which frames it missed, and asks for them again: it gets them
// resent, or, when they are no longer kept, a resync (the replica's snapshot).
// Every connection has its own queue and writer, so a slow peer never delays
// another one's frames. A replica that starts asks a warm peer for a snapshot
// (BroadcastOptions.Bootstrap).
type Broadcast struct {
	s    *Syncer
	name string
	o    BroadcastOptions

	mu      sync.Mutex
	pending [][]byte
	armed   bool

	// flushMu orders the frames: a sequence number is given and the frame queued
	// on every connection under it, so that each peer gets them in order.
	flushMu sync.Mutex
	seq     uint64 // the last frame published
	ring    resendRing

	warm      chan struct{}
	warmOnce  sync.Once
	warmEmpty atomic.Bool                 // warm with no peer's snapshot
	warmFrom  atomic.Pointer[string]      // the peer whose snapshot warmed it
	warmAsked atomic.Int64                // unix ns: when that snapshot was asked for
	asked     atomic.Pointer[snapshotAsk] // the peer asked for a snapshot, while one is on its way
	askedOf   sync.Map                    // peer -> time asked: the end of its snapshot warms, even after it was given up on
	declined  sync.Map                    // peer -> when it said it has no (warm) broadcast of the name (asked again after the snapshot timeout)
	warmAfter atomic.Int64                // ns from the syncer's start to warm
	sent      atomic.Uint64
	received  atomic.Uint64
	missing   atomic.Int64 // frames known missing from every peer now

	peers sync.Map // peer -> *broadcastPeer: the per-peer metrics

	// framesSent and framesReceived are the broadcast's series of
	// epp_peer_sync_broadcast_frames_total, looked up once: each frame counts.
	framesSent, framesReceived prometheus.Counter
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
	if o.Receive == nil && o.ReceiveMessage == nil {
		return nil, fmt.Errorf("peersync: broadcast %s: Receive (or ReceiveMessage) is required", name)
	}
	setDefault(&o.Window, DefaultBroadcastWindow)
	setDefault(&o.MaxMessageBytes, DefaultBroadcastMaxMessageBytes)
	setDefault(&o.SnapshotTimeout, DefaultSnapshotTimeout)
	setDefault(&o.ResendBytes, DefaultResendBytes)
	if o.Window < time.Millisecond || o.MaxMessageBytes < 16 || o.MaxMessageBytes > min(s.o.MaxMessageBytes/2, snapshotChunkBytes) ||
		o.SnapshotTimeout < 0 || o.ResendBytes < 0 {
		return nil, fmt.Errorf("peersync: broadcast %s: window %v (at least 1ms), maxMessageBytes %d (16 to %d), snapshotTimeout %v and resendBytes %d (not negative)",
			name, o.Window, o.MaxMessageBytes, min(s.o.MaxMessageBytes/2, snapshotChunkBytes), o.SnapshotTimeout, o.ResendBytes)
	}
	b := &Broadcast{s: s, name: name, o: o, warm: make(chan struct{}), ring: resendRing{max: o.ResendBytes},
		framesSent: s.m.broadcastMessages.WithLabelValues(name, "sent"), framesReceived: s.m.broadcastMessages.WithLabelValues(name, "received")}
	if _, loaded := s.broadcasts.LoadOrStore(name, b); loaded {
		return nil, fmt.Errorf("peersync: broadcast %s registered twice", name)
	}
	s.m.broadcastWarm.WithLabelValues(name).Set(0)
	s.m.broadcastMissing.WithLabelValues(name).Set(0)
	if !o.Bootstrap {
		b.markWarm("", true)
	}
	return b, nil
}

// Publish sends msg to every peer, within the window. msg is copied. A message
// over MaxMessageBytes, or empty, is not sent (counted as unsendable).
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
		now := time.Now()
		time.AfterFunc(b.flushAt(now).Sub(now), b.flush)
	}
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
// frames within the message limit, each numbered and kept for resending.
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

	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	var seqd, plain [][]byte // the frames, for the peers that take sequenced ones and for the others
	for len(msgs) > 0 {
		n, size := 0, 0
		for n < len(msgs) && (n == 0 || size+len(msgs[n])+8 <= snapshotChunkBytes) {
			size += len(msgs[n]) + 8
			n++
		}
		b.seq++
		f := wire.AppendBroadcastSeq(nil, wire.BroadcastSequenced, b.name, b.seq, msgs[:n])
		b.ring.add(b.seq, f)
		seqd = append(seqd, f)
		plain = append(plain, wire.AppendBroadcast(nil, 0, b.name, msgs[:n]))
		b.sent.Add(uint64(n))
		msgs = msgs[n:]
	}
	b.framesSent.Add(float64(len(seqd)))
	for _, o := range outs {
		c := o.conn.Load()
		pc := b.peerCounters(o.peer.ID())
		if c == nil || !c.broadcasts.Load() {
			pc.skipped.Add(float64(len(seqd)))
			continue
		}
		frames := plain
		if c.sequenced.Load() {
			frames = seqd
		}
		for _, f := range frames {
			if !c.q.put(queued{frame: f, kind: kindBroadcast, b: b}, false) {
				// The peer reads too slowly: it learns of the gap from the next
				// frame or the cursor after it (tick), and asks again.
				pc.skipped.Inc()
				c.skipped.Store(true)
			}
		}
	}
}

// sendCursor queues on c the number of the last frame published: a peer that
// missed some asks for them.
func (b *Broadcast) sendCursor(c *outConn) {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	c.q.put(queued{frame: wire.AppendBroadcastSeq(nil, wire.BroadcastSequenced|wire.BroadcastCursor, b.name, b.seq, nil), kind: kindControl}, true)
}

// broadcastConnUp runs when the connection c to a peer says it takes broadcasts:
// each broadcast's cursor starts it (sequenced peers), and a replica that wants a
// snapshot may ask this peer.
func (s *Syncer) broadcastConnUp(c *outConn) {
	if c.sequenced.Load() {
		s.broadcasts.Range(func(_, v any) bool {
			v.(*Broadcast).sendCursor(c)
			return true
		})
	}
	s.askSnapshots(s.o.now())
}

// Warm is closed once a peer's snapshot arrived whole (or there was no warm peer to
// ask): see BroadcastOptions.Bootstrap.
func (b *Broadcast) Warm() <-chan struct{} { return b.warm }

// WarmAfter is how long after the syncer was created the broadcast got warm (0
// while it is not).
func (b *Broadcast) WarmAfter() time.Duration { return time.Duration(b.warmAfter.Load()) }

// Stats are the messages sent and received.
func (b *Broadcast) Stats() (sent, received uint64) { return b.sent.Load(), b.received.Load() }

// markWarm makes the broadcast warm: from peer's snapshot, or empty (no warm peer
// to ask, or none needed).
func (b *Broadcast) markWarm(peer string, empty bool) {
	b.warmOnce.Do(func() {
		after := b.s.o.now().Sub(time.Unix(0, int64(b.s.hello.Start)))
		b.warmAfter.Store(max(int64(after), 1))
		b.warmEmpty.Store(empty)
		if !empty {
			b.warmFrom.Store(&peer)
			if at, ok := b.askedOf.Load(peer); ok {
				b.warmAsked.Store(at.(time.Time).UnixNano())
			}
		}
		b.s.m.broadcastWarm.WithLabelValues(b.name).Set(1)
		if b.o.Bootstrap {
			b.s.m.broadcastWarmSeconds.WithLabelValues(b.name).Set(after.Seconds())
			if empty {
				b.s.log.Info("broadcast warm, empty: no warm peer to take a snapshot from", "broadcast", b.name, "after", after.Round(time.Millisecond).String())
			} else {
				b.s.log.Info("broadcast warm", "broadcast", b.name, "after", after.Round(time.Millisecond).String(), "from", peer)
			}
		}
		close(b.warm)
		b.s.settleCursors(b)
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

// askSnapshots asks a snapshot for every broadcast that wants one and has none on
// its way: of the warm peers connected both ways, the longest-running one (the
// earliest start in its hello) that has not declined lately. A replica whose every
// peer declined (cold, or without the broadcast), or did not connect within the
// snapshot timeout of this replica's start, is warm, empty: the first replicas of
// a fleet start together, and none may stay cold for good.
func (s *Syncer) askSnapshots(now time.Time) {
	if !s.peersReady() {
		return
	}
	s.broadcasts.Range(func(_, v any) bool {
		b := v.(*Broadcast)
		if !b.o.Bootstrap || b.isWarm() {
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
		type candidate struct {
			o     *outStream
			c     *outConn
			start uint64
		}
		var cands []candidate
		waiting := false // a peer that may still answer
		up := now.Sub(time.Unix(0, int64(s.hello.Start)))
		s.mu.Lock()
		for _, rec := range s.peers {
			if at, no := b.declined.Load(rec.id); no && now.Sub(at.(time.Time)) < b.o.SnapshotTimeout {
				continue
			}
			c := rec.out.conn.Load()
			if c == nil || !c.broadcasts.Load() || rec.in == nil {
				// Not connected both ways (yet): it may, until the snapshot
				// timeout after this replica's start.
				if up < b.o.SnapshotTimeout {
					waiting = true
				}
				continue
			}
			cands = append(cands, candidate{o: rec.out, c: c, start: rec.in.hello.Start})
		}
		s.mu.Unlock()
		if waiting && up < min(b.o.SnapshotTimeout/4, time.Second) {
			// A peer still connecting may be the longest-running one: the first
			// to connect is not chosen for being first.
			return true
		}
		slices.SortFunc(cands, func(x, y candidate) int {
			switch {
			case x.start < y.start:
				return -1
			case x.start > y.start:
				return 1
			}
			return 0
		})
		for _, k := range cands {
			if k.o.peer.ID() == last && len(cands) > 1 {
				continue
			}
			ask := &snapshotAsk{peer: k.o.peer.ID(), since: now}
			if b.asked.CompareAndSwap(nil, ask) {
				b.askedOf.Store(ask.peer, now)
				k.o.send(k.c, wire.AppendRequest(nil, b.name))
			}
			return true
		}
		if len(cands) == 0 && !waiting && b.asked.Load() == nil {
			b.markWarm("", true)
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
	peer := in.rec.id
	b.framesReceived.Inc()
	kind := Live
	switch {
	case f.Flags&wire.BroadcastSnapshot != 0 && f.Flags&wire.BroadcastResync != 0:
		cur := in.rec.cursor(b.name)
		if !cur.resyncExpected(in.hello.Nonce) {
			s.reject(RejectUnsolicited, "a resync this replica did not ask for; left out", "peer", peer, "broadcast", b.name)
			return "", nil
		}
		kind = Resync
	case f.Flags&wire.BroadcastSnapshot != 0:
		if _, asked := b.askedOf.Load(peer); !asked {
			s.reject(RejectUnsolicited, "a snapshot this replica did not ask for; left out", "peer", peer, "broadcast", b.name)
			return "", nil
		}
		kind = Snapshot
	case f.Flags&wire.BroadcastSequenced != 0:
		if len(f.Messages) > 0 && f.Flags&wire.BroadcastCursor != 0 {
			return RejectMalformed, fmt.Errorf("a cursor with messages")
		}
		deliver := s.observeSeq(in, b, f.Flags, f.Seq)
		if !deliver {
			return "", nil
		}
		if f.Flags&wire.BroadcastResent != 0 {
			kind = Resent
		}
	}
	b.deliver(s, peer, f.Messages, kind)
	switch kind {
	case Snapshot:
		b.snapshotFrame(peer, f.Flags)
	case Resync:
		if f.Flags&wire.BroadcastSnapshotEnd != 0 && f.Flags&wire.BroadcastSequenced != 0 {
			s.resyncEnded(in, b, f.Seq)
		}
	}
	return "", nil
}

// deliver hands msgs to the consumer.
func (b *Broadcast) deliver(s *Syncer, peer string, msgs [][]byte, kind MessageKind) {
	bad := 0
	for _, m := range msgs {
		if len(m) > b.o.MaxMessageBytes {
			s.m.rejections.WithLabelValues(RejectOversized).Inc()
			continue
		}
		var err error
		if b.o.ReceiveMessage != nil {
			err = b.o.ReceiveMessage(Message{Peer: peer, Data: m, Kind: kind})
		} else {
			err = b.o.Receive(peer, m)
		}
		if err != nil {
			bad++
			s.logUndecodable(peer, "broadcast "+b.name, err)
		}
	}
	if bad > 0 {
		s.m.rejections.WithLabelValues(RejectUndecodable).Add(float64(bad))
	}
	b.received.Add(uint64(len(msgs)))
}

// snapshotFrame follows a frame of a snapshot from peer: the end of a snapshot that
// arrived whole warms the broadcast, whichever peer asked it was (one given up on
// may still end first); a frame of the snapshot asked now restarts its timeout, so
// that a snapshot that goes on arriving is never given up; a peer that has none (or
// none warm) is asked again only after the snapshot timeout.
func (b *Broadcast) snapshotFrame(peer string, flags byte) {
	ask := b.asked.Load()
	current := ask != nil && ask.peer == peer
	switch {
	case flags&wire.BroadcastSnapshotEnd == 0:
		if current {
			b.asked.CompareAndSwap(ask, &snapshotAsk{peer: peer, since: b.s.o.now()})
		}
	case flags&wire.BroadcastNotHere != 0:
		b.declined.Store(peer, b.s.o.now())
		if current {
			b.asked.CompareAndSwap(ask, nil)
			b.s.askSnapshots(b.s.o.now()) // the next one, at once
		}
	default:
		b.markWarm(peer, false)
	}
}

// serveSnapshot answers in's peer's Request frame: the broadcast's snapshot, on this
// replica's own connection to that peer (once it has one that takes broadcasts).
// A broadcast that is not warm itself says so (its snapshot would be partial), and
// the peer asks another.
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
	if !in.rec.bulk.CompareAndSwap(false, true) {
		return "", nil // one at a time per peer (it asks again)
	}
	go func() {
		defer in.rec.bulk.Store(false)
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
		declined := wire.BroadcastSnapshot | wire.BroadcastSnapshotEnd | wire.BroadcastNotHere
		switch {
		case !ok:
			// Nothing of that name here: an empty snapshot, so that the peer asks
			// another.
			o.send(c, wire.AppendBroadcast(nil, declined, name, nil))
		case !v.(*Broadcast).isWarm():
			o.send(c, wire.AppendBroadcast(nil, declined|wire.BroadcastCold, name, nil))
		default:
			v.(*Broadcast).writeSnapshot(o, c, wire.BroadcastSnapshot, 0)
		}
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

// writeSnapshot queues the snapshot on c in frames of at most snapshotChunkBytes,
// each once the queue has room, the last one marked as the end (flags: a snapshot,
// or a resync, whose end carries seq). One that cannot be queued whole is logged;
// the peer asks again.
func (b *Broadcast) writeSnapshot(o *outStream, c *outConn, flags byte, seq uint64) {
	s := b.s
	start := s.o.now()
	var msgs [][]byte
	size, total, frames := 0, 0, 0
	failed := false
	send := func(flags byte, seq uint64) {
		f := wire.AppendBroadcastSeq(nil, flags, b.name, seq, msgs)
		if !c.q.putBulk(queued{frame: f, kind: kindBulk}, c.broken) {
			failed = true
		}
		total += len(f)
		frames++
		msgs, size = msgs[:0], 0
	}
	if b.o.Snapshot != nil {
		b.o.Snapshot(func(m []byte) bool {
			if failed {
				return false
			}
			if len(m) == 0 || len(m) > b.o.MaxMessageBytes {
				return true
			}
			if size+len(m)+8 > snapshotChunkBytes {
				send(flags, 0)
			}
			msgs = append(msgs, append([]byte(nil), m...))
			size += len(m) + 8
			return !failed
		})
	}
	if !failed {
		end := flags | wire.BroadcastSnapshotEnd
		if flags&wire.BroadcastResync != 0 {
			end |= wire.BroadcastSequenced
		}
		send(end, seq)
	}
	what := "snapshot"
	if flags&wire.BroadcastResync != 0 {
		what = "resync"
	}
	if failed {
		s.log.Info("a "+what+" could not be sent whole; the peer will ask again", "broadcast", b.name, "peer", o.peer.ID())
		return
	}
	s.m.broadcastMessages.WithLabelValues(b.name, what+"-sent").Add(float64(frames))
	s.log.V(1).Info("sent a "+what, "broadcast", b.name, "peer", o.peer.ID(), "bytes", total, "took", s.o.now().Sub(start).String())
}
