package peersync

import (
	"context"
	"net"
	"sync"
	"time"
)

// DefaultSendQueueBytes bounds the frames waiting to be written to one peer's
// connection. A state push that does not fit ends the connection (the peer is too
// slow; the next one starts from a full state); a published broadcast frame that
// does not fit is skipped for that peer (see Broadcast); a message to that peer
// alone waits for room (SendTo).
const DefaultSendQueueBytes = 4 << 20

// What a queued frame is, for what its writing counts.
type frameKind uint8

const (
	kindState     frameKind = iota // an interval's push
	kindBroadcast                  // a broadcast frame, published or sent to the peer alone
)

type queued struct {
	frame []byte
	kind  frameKind
	built time.Time  // a push: when its interval's message was built
	b     *Broadcast // a broadcast frame: whose
	// direct: a message to the peer alone (SendTo), not a published frame.
	direct bool
}

// sendQueue holds one connection's frames until its writer goroutine writes them,
// in the order they came: every write to a peer goes through it, so that a slow or
// stalled peer delays only its own frames, never another peer's, and nothing that
// publishes or pushes waits for a socket.
type sendQueue struct {
	mu    sync.Mutex
	items []queued
	bytes int
	max   int
	ready chan struct{} // one token: items wait
	room  chan struct{} // closed (and replaced) when a write made room
}

func newSendQueue(max int) *sendQueue {
	return &sendQueue{max: max, ready: make(chan struct{}, 1), room: make(chan struct{})}
}

// put queues it; unless force, only within the bound (an empty queue takes any
// frame). It reports whether it was queued.
func (q *sendQueue) put(it queued, force bool) bool {
	q.mu.Lock()
	if !force && len(q.items) > 0 && q.bytes+len(it.frame) > q.max {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, it)
	q.bytes += len(it.frame)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// putWhenRoom queues it once the queue has room for it (or is empty), or reports
// false when ctx or done ends first.
func (q *sendQueue) putWhenRoom(ctx context.Context, it queued, done <-chan struct{}) bool {
	for {
		q.mu.Lock()
		if len(q.items) == 0 || q.bytes+len(it.frame) <= q.max {
			q.mu.Unlock()
			return q.put(it, true)
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// take returns every queued frame, in order, leaving the queue empty (their bytes
// count until done gives them back).
func (q *sendQueue) take(into []queued) []queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	into = append(into[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	return into
}

// done gives back the bytes of frames written.
func (q *sendQueue) done(n int) {
	q.mu.Lock()
	q.bytes -= n
	close(q.room)
	q.room = make(chan struct{})
	q.mu.Unlock()
}

// writeLoop writes c's queued frames as they come, until the connection breaks.
// Each batch gets writeTimeout: a peer that takes no byte for that long is gone,
// and its connection ends.
func (o *outStream) writeLoop(s *Syncer, c *outConn) {
	var batch []queued
	var bufs net.Buffers
	for {
		select {
		case <-c.q.ready:
		case <-c.broken:
			return
		}
		batch = c.q.take(batch)
		if len(batch) == 0 {
			continue
		}
		bufs = bufs[:0]
		n := 0
		for _, it := range batch {
			bufs = append(bufs, it.frame)
			n += len(it.frame)
		}
		_ = c.c.SetWriteDeadline(s.o.now().Add(s.writeTimeout()))
		w := bufs // WriteTo consumes its receiver
		_, err := w.WriteTo(c.c)
		c.q.done(n)
		if err != nil {
			select {
			case <-c.broken:
				return // the connection ended meanwhile (closed on purpose): no error of the peer's
			default:
			}
			if isTimeout(err) {
				s.m.dropped.Inc() // a peer that stopped reading: it starts again from a full state
			}
			o.fail(s, c, err)
			return
		}
		s.m.sentBytes.Add(float64(n))
		now := s.o.now()
		for _, it := range batch {
			switch it.kind {
			case kindState:
				s.m.pushSeconds.Observe(now.Sub(it.built).Seconds())
				s.m.sentMessages.Inc()
			case kindBroadcast:
				if !it.direct {
					it.b.peerCounters(o.peer.ID()).delivered.Inc()
				}
			}
		}
		clear(batch)
	}
}

// writeTimeout bounds one batch of writes to a peer.
func (s *Syncer) writeTimeout() time.Duration { return max(s.o.TTL, time.Second) }
