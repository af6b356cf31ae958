package dnssrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultTimeout  = 2 * time.Second
	// maxParallel bounds the address lookups of one round in flight.
	maxParallel = 8
)

// ReasonLookup is the failure reason of a DNS lookup that did not answer.
const ReasonLookup = "lookup"

// Config says what to ask and how.
type Config struct {
	// Name is the SRV name: _<port name>._tcp.<service>.<namespace>.svc[.<cluster domain>].
	Name string
	// Namespace of the peers.
	Namespace string
	// Family is the preferred address family of peers with both (4 or 6; 0: 4).
	Family int
	// Interval between lookups (DefaultInterval when zero), jittered by ±10%.
	Interval time.Duration
	// Timeout of one lookup round (DefaultTimeout when zero).
	Timeout time.Duration
	// Resolver asks DNS; net.DefaultResolver when nil.
	Resolver *net.Resolver
}

// Source is the DNS SRV peer source (a discovery.Source).
type Source struct {
	cfg Config
	pub *discovery.Publisher
	log logr.Logger
}

var _ discovery.Source = (*Source)(nil)

// NewSource returns a Source for cfg, publishing through pub.
func NewSource(cfg Config, pub *discovery.Publisher, log logr.Logger) *Source {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	return &Source{cfg: cfg, pub: pub, log: log.WithValues("name", cfg.Name)}
}

// Run looks the name up at once and then every interval until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	for {
		s.lookup(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(s.cfg.Interval)):
		}
	}
}

// lookup runs one round: the SRV records, then each target's addresses. Any
// failure but "no such name" keeps the last good set.
func (s *Source) lookup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	set, err := s.resolve(ctx)
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return // stopping
	}
	if err != nil {
		s.pub.Fail(ReasonLookup, err)
		return
	}
	s.pub.ObserveRecompute(time.Since(start))
	s.pub.SetSelfListed(s.pub.Lists(set)) // the records of ready pods: its peers' too
	s.pub.Publish(set)
}

// resolve returns the peers the name lists now, ordered by ID.
func (s *Source) resolve(ctx context.Context) ([]peers.PeerMetadata, error) {
	_, srvs, err := s.cfg.Resolver.LookupSRV(ctx, "", "", s.cfg.Name)
	if notFound(err) {
		return []peers.PeerMetadata{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("SRV lookup of %s: %w", s.cfg.Name, err)
	}
	type result struct {
		peer peers.PeerMetadata
		ok   bool
		err  error
	}
	results := make([]result, len(srvs))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, srv := range srvs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			addr, err := s.address(ctx, srv.Target)
			switch {
			case notFound(err): // gone since the SRV answer
			case err != nil:
				results[i].err = fmt.Errorf("address lookup of %s (a target of %s): %w", srv.Target, s.cfg.Name, err)
			default:
				results[i] = result{ok: true, peer: peers.PeerMetadata{Namespace: s.cfg.Namespace, Name: identity(srv.Target),
					Address: addr.String(), Port: int32(srv.Port), Ready: true, Serving: true}}
			}
		})
	}
	wg.Wait()
	byID := make(map[string]peers.PeerMetadata, len(results))
	for _, r := range results {
		if r.err != nil {
			return nil, r.err
		}
		if !r.ok {
			continue
		}
		// Two records of one target (two ports): the lower port, whatever the order.
		if prev, dup := byID[r.peer.ID()]; !dup || r.peer.Port < prev.Port {
			byID[r.peer.ID()] = r.peer
		}
	}
	out := make([]peers.PeerMetadata, 0, len(byID))
	for _, p := range byID {
		out = append(out, p)
	}
	peers.SortByID(out)
	return out, nil
}

// address is the target's address in the preferred family, else its first one
// (addresses ordered, so that the answer's order never matters).
func (s *Source) address(ctx context.Context, target string) (netip.Addr, error) {
	addrs, err := s.cfg.Resolver.LookupNetIP(ctx, "ip", target)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, &net.DNSError{Err: "no addresses", Name: target, IsNotFound: true}
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	want := s.cfg.Family
	if want == 0 {
		want = 4
	}
	for _, a := range addrs {
		if peers.FamilyOf(a) == want {
			return a, nil
		}
	}
	return addrs[0], nil
}

// identity is the first label of a target name.
func identity(target string) string {
	name, _, _ := strings.Cut(strings.TrimSuffix(target, "."), ".")
	return name
}

func notFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}
