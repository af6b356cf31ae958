package peersync

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadTickKeepsEveryPromise runs the syncer's tests of delivery, expiry,
// hostile input, messages to one peer, budgets and TLS again with every replica reading at a 5ms tick
// (Options.ReadTick): reading at the ticks changes when a frame is read, never what
// is read, what is refused, or when a silent or stalled peer is let go.
func TestReadTickKeepsEveryPromise(t *testing.T) {
	if !canPace {
		t.Fatal("Options.ReadTick has no effect on this platform (not Unix): its tests cannot run")
	}
	testReadTick = 5 * time.Millisecond
	defer func() { testReadTick = 0 }()
	for name, test := range map[string]func(*testing.T){
		"values":            TestValuesReachEveryReplicaAndSum,
		"silent peer":       TestSilentPeerExpiresAfterTTLAndComesBack,
		"restart":           TestRestartedPeerIsNeverCountedTwice,
		"malformed":         TestMalformedAndOversizedInputIsACountedRejection,
		"every rejection":   TestEveryRejectionIsCounted,
		"broadcast":         TestBroadcastReachesEveryPeerWithinTheWindow,
		"to one peer":       TestSendToReachesOnePeerAlone,
		"slow peer":         TestASlowPeerDoesNotDelayTheOthers,
		"budget":            TestAPeerOverItsBudgetIsCutOff,
		"hostile broadcast": TestHostileBroadcastFramesAreRefused,
		"mutual TLS":        TestMutualTLS,
	} {
		t.Run(name, test)
	}
}

// pacedPair is a paced connection and the other end of it, on 127.0.0.1.
func pacedPair(t *testing.T, tick time.Duration, lastRead *atomic.Int64) (*pacedConn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	p := newPacedConn(r, tick, lastRead)
	p.pace()
	if !p.paced {
		t.Fatal("a TCP connection on this platform is not paced")
	}
	return p, w
}

// sleepPast sleeps to offset past the next tick of the grid.
func sleepPast(tick, offset time.Duration) {
	time.Sleep(time.Until(nextTick(time.Now(), tick).Add(offset)))
}

func TestPacedReadsWaitForTheTick(t *testing.T) {
	const tick = 50 * time.Millisecond
	var lastRead atomic.Int64
	p, w := pacedPair(t, tick, &lastRead)
	buf := make([]byte, 64)
	for i := range 5 {
		// Busy: the syncer read just now, so a read that finds nothing waits for
		// the tick, and bytes written in between are read at it, not before.
		lastRead.Store(time.Now().UnixNano())
		sleepPast(tick, 10*time.Millisecond)
		got := make(chan time.Time, 1)
		go func() {
			n, err := io.ReadFull(p, buf[:3])
			if err != nil || string(buf[:n]) != "abc" {
				t.Errorf("read %q, %v; want abc", buf[:n], err)
			}
			got <- time.Now()
		}()
		time.Sleep(5 * time.Millisecond)
		written := time.Now()
		if _, err := w.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if at.Before(nextTick(written, tick)) {
			t.Errorf("round %d: bytes written at %v were read at %v, before the next tick (%v)", i, written.Format("05.000"), at.Format("05.000"), nextTick(written, tick).Format("05.000"))
		}
	}
}

func TestAnIdlePacedConnectionReadsAtOnce(t *testing.T) {
	const tick = 100 * time.Millisecond
	var lastRead atomic.Int64 // nothing read for long: idle
	p, w := pacedPair(t, tick, &lastRead)
	for i := range 3 {
		lastRead.Store(time.Now().Add(-time.Second).UnixNano())
		sleepPast(tick, 5*time.Millisecond)
		got := make(chan time.Time, 1)
		go func() {
			buf := make([]byte, 1)
			if _, err := io.ReadFull(p, buf); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		time.Sleep(10 * time.Millisecond)
		written := time.Now()
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if at := <-got; !at.Before(nextTick(written, tick)) {
			t.Errorf("round %d: an idle replica read bytes written at %v only at %v: it should wake for them", i, written.Format("05.000"), at.Format("05.000"))
		}
	}
}

func TestPacedReadDeadlineAndClose(t *testing.T) {
	var lastRead atomic.Int64
	lastRead.Store(time.Now().Add(time.Hour).UnixNano()) // busy throughout
	p, w := pacedPair(t, 20*time.Millisecond, &lastRead)
	start := time.Now()
	if err := p.SetReadDeadline(start.Add(70 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := p.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("read past the deadline: %v is not a net.Error timeout", err)
	}
	if took := time.Since(start); took < 70*time.Millisecond || took > time.Second {
		t.Errorf("read deadline 70ms: returned after %v", took)
	}
	// The deadline cleared, bytes are read; the other end closing is io.EOF.
	_ = p.SetReadDeadline(time.Time{})
	if _, err := w.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p, make([]byte, 1)); err != nil {
		t.Fatalf("read after the deadline was cleared: %v", err)
	}
	w.Close()
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read after the peer closed: %v, want io.EOF", err)
	}
	// Closed here: the read ends with net.ErrClosed.
	p.Close()
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
}

func TestReadTickIsChecked(t *testing.T) {
	for _, tick := range []time.Duration{-time.Millisecond, time.Microsecond, 101 * time.Millisecond} {
		if CheckReadTick(tick) == nil {
			t.Errorf("read tick %v accepted", tick)
		}
	}
	for _, tick := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond} {
		if err := CheckReadTick(tick); err != nil {
			t.Errorf("read tick %v: %v", tick, err)
		}
	}
}
