// Package dnsserver is a small authoritative DNS server for tests, on 127.0.0.1:
// it answers SRV, A and AAAA questions from records the test sets, over UDP and TCP,
// and can be made to fail (SERVFAIL) or to stay silent (a lookup times out).
package dnsserver

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// SRV is one SRV record: a target host name and port.
type SRV struct {
	Target string
	Port   uint16
}

// Mode is how the server answers.
type Mode int32

const (
	// Answer answers from the records (NXDOMAIN for names it has none of).
	Answer Mode = iota
	// ServFail answers every question with SERVFAIL.
	ServFail
	// Silent reads questions and never answers.
	Silent
)

// Server is the DNS server. Its zero value is not usable; call Start.
type Server struct {
	udp  net.PacketConn
	tcp  net.Listener
	mode atomic.Int32

	mu      sync.Mutex
	srv     map[string][]SRV
	addrs   map[string][]netip.Addr
	queries int
}

// Start starts a server on a free port of 127.0.0.1 (the same for UDP and TCP).
func Start() (*Server, error) {
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err != nil {
			udp.Close()
			continue // the TCP port is taken: another one
		}
		s := &Server{udp: udp, tcp: tcp, srv: map[string][]SRV{}, addrs: map[string][]netip.Addr{}}
		go s.serveUDP()
		go s.serveTCP()
		return s, nil
	}
	return nil, io.ErrUnexpectedEOF
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// Close stops the server.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
}

// SetMode sets how the server answers from now on.
func (s *Server) SetMode(m Mode) { s.mode.Store(int32(m)) }

// SetSRV sets the SRV records of name (none: the name does not exist).
func (s *Server) SetSRV(name string, records ...SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(records) == 0 {
		delete(s.srv, canonical(name))
		return
	}
	s.srv[canonical(name)] = records
}

// SetAddrs sets the A and AAAA records of host (none: the host does not exist).
func (s *Server) SetAddrs(host string, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(addrs) == 0 {
		delete(s.addrs, canonical(host))
		return
	}
	parsed := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		parsed = append(parsed, netip.MustParseAddr(a))
	}
	s.addrs[canonical(host)] = parsed
}

// Queries is how many questions the server was asked.
func (s *Server) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

func (s *Server) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n], 512); ok {
			_, _ = s.udp.WriteTo(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				var size [2]byte
				if _, err := io.ReadFull(c, size[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(size[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out, ok := s.answer(msg, 65535)
				if !ok {
					continue
				}
				framed := binary.BigEndian.AppendUint16(nil, uint16(len(out)))
				if _, err := c.Write(append(framed, out...)); err != nil {
					return
				}
			}
		}()
	}
}

// answer builds the response to a query; false: do not answer.
func (s *Server) answer(query []byte, limit int) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	s.queries++
	srvs := s.srv[strings.ToLower(q.Name.String())]
	addrs := s.addrs[strings.ToLower(q.Name.String())]
	_, known := s.srv[strings.ToLower(q.Name.String())]
	_, knownHost := s.addrs[strings.ToLower(q.Name.String())]
	s.mu.Unlock()

	mode := Mode(s.mode.Load())
	if mode == Silent {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: dnsmessage.RCodeSuccess}
	switch {
	case mode == ServFail:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !known && !knownHost:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if rh.RCode == dnsmessage.RCodeSuccess {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
		switch q.Type {
		case dnsmessage.TypeSRV:
			for _, r := range srvs {
				target, err := dnsmessage.NewName(canonical(r.Target))
				if err != nil {
					return nil, false
				}
				if err := b.SRVResource(rr, dnsmessage.SRVResource{Priority: 0, Weight: 10, Port: r.Port, Target: target}); err != nil {
					return nil, false
				}
			}
		case dnsmessage.TypeA:
			for _, a := range addrs {
				if a.Is4() {
					if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
						return nil, false
					}
				}
			}
		case dnsmessage.TypeAAAA:
			for _, a := range addrs {
				if a.Is6() {
					if err := b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()}); err != nil {
						return nil, false
					}
				}
			}
		}
	}
	out, err := b.Finish()
	if err != nil || len(out) > limit {
		return nil, false // too big for UDP: a real server would truncate; the tests stay small
	}
	return out, true
}
