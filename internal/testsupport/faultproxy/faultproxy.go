// Package faultproxy is a TCP proxy on 127.0.0.1 for fault tests: it forwards to a
// target (the API server) and can, on command, refuse connections as a stopped
// server does, reset them, black-hole them (drop every byte silently, no reset), or
// divert them to another server, and counts the connections it is offered.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// Mode is what the proxy does with connections.
type Mode int

const (
	// Pass forwards every connection to the target.
	Pass Mode = iota
	// Refuse closes the listener: new connections are refused, as by a stopped
	// server; open connections are reset.
	Refuse
	// Reset accepts new connections and resets them at once; open connections are
	// reset.
	Reset
	// BlackHoleOpen silently drops every byte of the open connections (no reset) and
	// forwards new ones: a connection gone dead under a NAT or a firewall.
	BlackHoleOpen
	// BlackHole silently drops every byte of every connection, open or new.
	BlackHole
	// Divert forwards new connections to the divert address instead; open
	// connections are reset.
	Divert
)

// Proxy is a fault-injecting TCP proxy.
type Proxy struct {
	addr   string
	target string

	mu       sync.Mutex
	mode     Mode
	divert   string
	listener net.Listener
	conns    map[*pair]bool
	closed   bool

	accepted atomic.Int64
}

type pair struct {
	client, server net.Conn
	dropped        atomic.Bool
}

// New starts a proxy on a free 127.0.0.1 port forwarding to target.
func New(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: l.Addr().String(), target: target, listener: l, conns: map[*pair]bool{}}
	go p.serve(l)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Accepted is how many connections the proxy accepted so far (refused ones are not
// seen; use Reset to count attempts).
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Set switches the mode; divert is the address for Divert.
func (p *Proxy) Set(m Mode, divert string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.mode
	p.mode, p.divert = m, divert
	switch m {
	case Refuse:
		if p.listener != nil {
			_ = p.listener.Close()
			p.listener = nil
		}
		p.resetAllLocked()
	case Reset, Divert:
		p.resetAllLocked()
	case BlackHoleOpen, BlackHole:
		for c := range p.conns {
			c.dropped.Store(true)
		}
	}
	if m != Refuse && p.listener == nil && !p.closed {
		l, err := listenAgain(p.addr)
		if err != nil {
			p.mode = prev
			return err
		}
		p.listener = l
		go p.serve(l)
	}
	return nil
}

// listenAgain binds the same address again (a restarted server keeps its address).
func listenAgain(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

func (p *Proxy) resetAllLocked() {
	for c := range p.conns {
		reset(c.client)
		_ = c.server.Close()
		delete(p.conns, c)
	}
}

// reset closes a connection with a TCP RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.listener != nil {
		_ = p.listener.Close()
		p.listener = nil
	}
	p.resetAllLocked()
}

func (p *Proxy) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	p.mu.Lock()
	mode, target := p.mode, p.target
	if mode == Divert {
		target = p.divert
	}
	p.mu.Unlock()
	switch mode {
	case Refuse, Reset:
		reset(client)
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	c := &pair{client: client, server: server}
	c.dropped.Store(mode == BlackHole)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reset(client)
		_ = server.Close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { copyUnlessDropped(server, client, &c.dropped); done <- struct{}{} }()
	go func() { copyUnlessDropped(client, server, &c.dropped); done <- struct{}{} }()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = client.Close()
	_ = server.Close()
	<-done
}

// copyUnlessDropped copies src to dst; while dropped, what it reads goes nowhere.
func copyUnlessDropped(dst io.Writer, src io.Reader, dropped *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !dropped.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// Through starts a proxy to the API server of cfg, closed when the test ends, and
// returns it with a copy of cfg that reaches the server through it.
func Through(t testing.TB, cfg *rest.Config) (*Proxy, *rest.Config) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	through := rest.CopyConfig(cfg)
	through.Host = "https://" + p.Addr()
	return p, through
}
