package peersync

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// Admission: what a connection goes through before a single byte of state is read.
//
//  1. Its source: it must be a peer's address. A connection from an address that
//     discovery does not list (yet) waits, reading nothing, until the peer set
//     changes and lists it or the handshake timeout ends; only then is it refused
//     and counted as unknown-source. Until discovery has its first set, nothing is
//     judged. One that leaves before it is judged was never refused.
//  2. Mutual TLS, if on.
//  3. This replica's banner, then the dialer's preface (a reachability probe leaves
//     here) and its hello, read unbuffered and capped at wire.MaxHelloBytes.
//  4. The hello's name must be the peer that discovery lists at that address
//     (waiting as in 1 when it is not, yet), its start time not in the future, and
//     with TLSFiles.RequireReplicaName the certificate must name it. When no peer
//     is listed at that address any more by then, the peer left during the
//     handshake: the connection is closed, and not counted as refused.
//
// Connections not yet admitted are bounded in all and per source address; the
// handshake timeout bounds how long each is held.

// admission counts the connections not yet admitted, in all and per source.
type admission struct {
	mu       sync.Mutex
	max, per int
	total    int
	bySource map[string]int
	gauge    prometheus.Gauge
}

func (a *admission) init(max, per int, gauge prometheus.Gauge) {
	a.max, a.per, a.bySource, a.gauge = max, per, map[string]int{}, gauge
	a.gauge.Set(0)
}

// acquire takes a place for a connection from ip; release gives it back (once).
func (a *admission) acquire(ip string) (release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.max || a.bySource[ip] >= a.per {
		return nil, false
	}
	a.total++
	a.bySource[ip]++
	a.gauge.Set(float64(a.total))
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.total--
			if a.bySource[ip]--; a.bySource[ip] == 0 {
				delete(a.bySource, ip)
			}
			a.gauge.Set(float64(a.total))
		})
	}, true
}

// serve accepts the peers' connections until ctx ends. An accept error (too many
// open files, say) is counted and retried after a backoff: it never ends the
// syncer. When serve returns, every connection it started has ended.
func (s *Syncer) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: the connections end with ctx
	return reachability.Accept(ctx, s.o.Listener, func(conn net.Conn) {
		ip := remoteIP(conn)
		release, ok := s.pending.acquire(ip)
		if !ok {
			conn.Close()
			s.reject(RejectTooManyPending, "too many connections waiting for admission; closed at once", "address", ip)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			s.serveConn(ctx, conn, ip, release)
		}()
	}, func(err error) {
		s.m.acceptErrors.Inc()
		if s.m.rateLimit("accept", s.o.now()) {
			s.log.Error(err, "accepting a peer's connection failed; retrying")
		}
	})
}

func remoteIP(c net.Conn) string {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return ""
	}
	return ap.Addr().Unmap().String()
}

// membersChanged returns a channel closed at the next change of the membership.
func (s *Syncer) membersChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// peersReady reports whether discovery has its first peer set.
func (s *Syncer) peersReady() bool {
	if s.o.PeersReady == nil {
		return true
	}
	select {
	case <-s.o.PeersReady:
		return true
	default:
		return false
	}
}

// awaitListed waits until judge admits (""), or refuses for good, or the deadline
// or ctx ends; it returns judge's last reason then. judge runs again at every
// change of the membership. Nothing is read from the connection.
func (s *Syncer) awaitListed(ctx context.Context, deadline time.Time, judge func() string) string {
	var timer *time.Timer
	for {
		changed := s.membersChanged()
		var ready <-chan struct{}
		reason := RejectNotReady
		if s.peersReady() {
			if reason = judge(); reason == "" || !waitable(reason) {
				return reason
			}
		} else {
			ready = s.o.PeersReady
		}
		left := deadline.Sub(s.o.now())
		if left <= 0 {
			return reason
		}
		if timer == nil {
			timer = time.NewTimer(left)
			defer timer.Stop()
		}
		select {
		case <-changed:
		case <-ready:
		case <-timer.C:
			return reason
		case <-ctx.Done():
			return ""
		}
	}
}

// waitable reports whether a refusal may turn into an admission when the peer set
// changes.
func waitable(reason string) bool {
	return reason == RejectUnknownSource || reason == RejectIdentity || reason == RejectNotReady
}

// left reports whether the other end closed an unadmitted connection (it sent
// nothing it had to: a probe, or a dialer that gave up): then it was never refused.
func left(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	var b [1]byte
	_, err := conn.Read(b[:])
	return isClosed(err) || (err != nil && !isTimeout(err))
}

// admit takes conn from its accept to its admission as a peer's connection in force
// (see Admission). It returns nil when the connection is refused or left; the
// refusal is counted and logged.
func (s *Syncer) admit(ctx context.Context, conn net.Conn, ip string) (*inStream, net.Conn) {
	deadline := s.o.now().Add(s.o.HandshakeTimeout)
	_ = conn.SetDeadline(deadline)
	if reason := s.awaitListed(ctx, deadline, func() string {
		if s.isPeerAddress(ip) {
			return ""
		}
		return RejectUnknownSource
	}); reason != "" {
		if !left(conn) {
			s.reject(reason, "refused a connection from an address that discovery does not list", "address", ip, "waited", s.o.HandshakeTimeout)
		}
		return nil, nil
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	if s.o.TLS != nil {
		cfg, err := s.o.TLS.serverConfig()
		if err != nil {
			s.log.Error(err, "mTLS: cannot load the certificates; refusing the peer's connection", "address", ip)
			s.m.rejections.WithLabelValues(RejectTLS).Inc()
			return nil, nil
		}
		tc := tls.Server(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			s.rejectHandshake(err, RejectTLS, "mTLS handshake failed", ip)
			return nil, nil
		}
		conn = tc
	}
	if _, err := io.WriteString(conn, reachability.AnswerLine(s.hello.ID())); err != nil {
		return nil, nil
	}
	h, helloBytes, reason, err := readHello(conn)
	switch {
	case reason == "" && err != nil:
		s.rejectHandshake(err, RejectMalformed, "a malformed hello", ip)
		return nil, nil
	case reason == "probe":
		return nil, nil // a reachability probe: it connects and leaves
	case reason != "":
		s.reject(reason, "refused a connection before its hello", "address", ip, "error", err.Error())
		return nil, nil
	}
	if start := time.Unix(0, int64(min(h.Start, 1<<63-1))); start.After(s.o.now().Add(s.o.MaxClockSkew)) {
		s.reject(RejectClockSkew, "refused a hello that starts in the future", "address", ip, "replica", h.ID(), "start", start, "maxClockSkew", s.o.MaxClockSkew)
		return nil, nil
	}
	if tc, ok := conn.(*tls.Conn); ok && s.o.TLS.RequireReplicaName {
		if err := s.o.TLS.namesReplica(tc.ConnectionState(), h.Namespace, h.Name); err != nil {
			s.reject(RejectIdentity, "refused a hello that its certificate does not name", "address", ip, "replica", h.ID(), "error", err.Error())
			return nil, nil
		}
	}
	in := &inStream{conn: conn, hello: h}
	var rec *peerRec
	reason = s.awaitListed(ctx, deadline, func() string {
		var why string
		rec, why = s.attach(in, ip)
		return why
	})
	if rec == nil {
		switch reason {
		case "":
		case RejectUnknownSource:
			// Its address was a peer's when it came (1.): that peer left the
			// membership during the handshake, as a connection in force is closed
			// when its peer leaves. Nothing is refused.
			s.log.V(1).Info("closed a connection whose peer left the membership during its handshake", "address", ip, "replica", h.ID())
		default:
			s.reject(reason, "refused a peer's connection", "address", ip, "replica", h.ID())
		}
		return nil, nil
	}
	s.m.receivedBytes.Add(float64(len(wire.Preface) + helloBytes))
	// What this replica takes besides states (a first-version dialer discards it).
	_ = conn.SetWriteDeadline(s.o.now().Add(time.Second))
	if _, err := io.WriteString(conn, wire.FeaturesLine(wire.FeatureExchange)); err != nil {
		s.detach(in)
		return nil, nil
	}
	return in, conn
}

// rejectHandshake counts a handshake that failed: a timeout as handshake-timeout,
// a connection that the other end closed not at all (it left), anything else as
// reason.
func (s *Syncer) rejectHandshake(err error, reason, msg, ip string) {
	switch {
	case isTimeout(err):
		s.reject(RejectHandshakeTimeout, "a connection did not complete its handshake in time", "address", ip, "timeout", s.o.HandshakeTimeout)
	case isClosed(err):
	default:
		s.reject(reason, msg, "address", ip, "error", err.Error())
	}
}

// readHello reads the preface and the hello from conn, byte by byte up to the
// hello's end: nothing past it is read before the peer is admitted, and a hello is
// at most wire.MaxHelloBytes. reason is "probe" when the connection closed before a
// preface (a reachability probe), a rejection reason otherwise, "" with a non-nil
// err for an error of the connection. n is the bytes of the hello's frame.
func readHello(conn net.Conn) (h wire.Hello, n int, reason string, err error) {
	var pre [len(wire.Preface)]byte
	if _, err := io.ReadFull(conn, pre[:]); err != nil {
		if isClosed(err) {
			return h, 0, "probe", nil
		}
		return h, 0, "", err
	}
	if string(pre[:]) != wire.Preface {
		return h, 0, RejectPreface, errors.New("a connection that does not speak this protocol")
	}
	body, err := wire.ReadFrameInto(byteReader{conn}, wire.MaxHelloBytes, nil)
	if err != nil {
		if isTimeout(err) || isClosed(err) {
			return h, 0, "", err
		}
		if errors.Is(err, wire.ErrFrameTooLarge) {
			return h, 0, RejectOversized, err
		}
		if errors.Is(err, wire.ErrMalformed) {
			return h, 0, RejectMalformed, err
		}
		return h, 0, "", err
	}
	h, err = wire.ParseHello(body)
	if err != nil {
		return h, 0, RejectMalformed, fmt.Errorf("a malformed hello: %w", err)
	}
	return h, len(body), "", nil
}

// byteReader reads one byte at a time, so that nothing past the hello is consumed.
type byteReader struct{ r io.Reader }

func (b byteReader) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b byteReader) ReadByte() (byte, error) {
	var c [1]byte
	if _, err := io.ReadFull(b.r, c[:]); err != nil {
		return 0, err
	}
	return c[0], nil
}
