package peersync

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// pacedIdleAfter: a syncer that has read no frame for this long reads each next one
// when it arrives again, rather than at its tick (Options.ReadTick).
const pacedIdleAfter = 100 * time.Millisecond

// nextTick is the first instant of the tick grid after now: the grid is the wall
// clock's, so that the replicas' ticks (each one's reads and broadcast flushes) fall
// at the same instants.
func nextTick(now time.Time, tick time.Duration) time.Time {
	return now.Truncate(tick).Add(tick)
}

// pacedConn reads an admitted peer's connection at the syncer's ticks rather than
// when each frame arrives (Options.ReadTick): a Read that finds nothing in the
// socket sleeps to the next tick of the grid, where the reads of every other
// connection of the replica and its broadcast flushes fall too, so that the frames
// of all its peers cost the process one wake-up per tick rather than one each.
// While the syncer reads nothing for pacedIdleAfter, a Read waits for the bytes
// instead (an idle replica sleeps). Before pace is called it is conn unchanged.
//
// Its read deadline is kept here (the socket's own is cleared once paced): a Read
// past it returns os.ErrDeadlineExceeded, as a net.Conn's does.
type pacedConn struct {
	net.Conn
	raw      syscall.RawConn
	tick     time.Duration
	lastRead *atomic.Int64 // the syncer's: unix ns of the last bytes read on any paced connection
	paced    bool          // set by pace, on the reading goroutine
	deadline atomic.Int64  // unix ns of the read deadline; 0 none
}

// newPacedConn wraps conn, which paces once pace is called (if the platform and
// the connection allow it: pacing needs the socket's descriptor).
func newPacedConn(conn net.Conn, tick time.Duration, lastRead *atomic.Int64) *pacedConn {
	p := &pacedConn{Conn: conn, tick: tick, lastRead: lastRead}
	if sc, ok := conn.(syscall.Conn); ok && tick > 0 && canPace {
		p.raw, _ = sc.SyscallConn()
	}
	return p
}

// pace starts reading at the ticks; call it from the goroutine that reads, between
// two reads.
func (p *pacedConn) pace() {
	if p.raw == nil {
		return
	}
	p.paced = true
	_ = p.Conn.SetReadDeadline(time.Time{})
}

func (p *pacedConn) SetReadDeadline(t time.Time) error {
	p.setDeadline(t)
	if p.paced {
		return nil
	}
	return p.Conn.SetReadDeadline(t)
}

func (p *pacedConn) SetDeadline(t time.Time) error {
	p.setDeadline(t)
	if p.paced {
		return p.SetWriteDeadline(t)
	}
	return p.Conn.SetDeadline(t)
}

func (p *pacedConn) setDeadline(t time.Time) {
	if t.IsZero() {
		p.deadline.Store(0)
	} else {
		p.deadline.Store(t.UnixNano())
	}
}

func (p *pacedConn) Read(b []byte) (int, error) {
	if !p.paced || len(b) == 0 {
		return p.Conn.Read(b)
	}
	for {
		n, wait, err := readNow(p.raw, b)
		if !wait {
			if n > 0 {
				p.lastRead.Store(time.Now().UnixNano())
			}
			return n, err
		}
		now := time.Now()
		dl := p.deadline.Load()
		if dl != 0 && now.UnixNano() >= dl {
			return 0, os.ErrDeadlineExceeded
		}
		if now.UnixNano()-p.lastRead.Load() > int64(pacedIdleAfter) {
			return p.readWhenThere(b, dl)
		}
		wake := nextTick(now, p.tick)
		if dl != 0 && dl < wake.UnixNano() {
			wake = time.Unix(0, dl)
		}
		time.Sleep(wake.Sub(now))
	}
}

// readWhenThere is a plain read (under the deadline dl): the syncer is idle, and the
// next bytes wake this replica.
func (p *pacedConn) readWhenThere(b []byte, dl int64) (int, error) {
	t := time.Time{}
	if dl != 0 {
		t = time.Unix(0, dl)
	}
	_ = p.Conn.SetReadDeadline(t)
	n, err := p.Conn.Read(b)
	_ = p.Conn.SetReadDeadline(time.Time{})
	if n > 0 {
		p.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}
