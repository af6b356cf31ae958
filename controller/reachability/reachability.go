// Package reachability tells discovered from reachable: it opens a TCP connection
// to every peer's peer-sync port on a jittered interval and keeps, per peer,
// whether it answered, when it was last probed and how long the connection took.
//
// Probing never changes membership: the peer set stays the source's business
// (EndpointSlices or a peers file), and an unreachable peer stays a peer. Probes are
// bounded: at most one in flight per peer, a total rate across all peers, a connect
// timeout, and a peer's probes stop when it leaves the set.
package reachability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// IntervalEnv is the environment variable that sets a probe interval where no flag
// or parameter does (the epp binary's --epp-peer-probe-interval default, the EPP
// plugin's probeInterval; both are discovery.ProbeIntervalSetting): what a kustomize
// component can add to a container without rewriting its args or configuration.
const IntervalEnv = "EPP_PEER_PROBE_INTERVAL"

// MinInterval is the shortest probe interval accepted, everywhere: flags,
// parameters, the chart's schema, the Terraform module's validation.
const MinInterval = 100 * time.Millisecond

// CheckInterval is the one rule of a probe interval, whichever way it comes (the
// binary's flag, the EPP plugin's parameter, IntervalEnv for either): 0 is off,
// anything else at least MinInterval. The error says what is wanted; the caller
// names the flag, parameter or variable.
func CheckInterval(d time.Duration) error {
	if d == 0 || d >= MinInterval {
		return nil
	}
	return fmt.Errorf("want 0 (off) or at least %v", MinInterval)
}

// Defaults of Options.
const (
	DefaultMaxRate = 20.0 // probes per second, all peers together
	DefaultJitter  = 0.2
	maxTimeout     = time.Second
)

// Options configure a Prober. Interval is required; the rest have defaults.
type Options struct {
	// Interval between two probes of one peer (jittered by ±Jitter). The first probe
	// of a peer comes at a random point within one interval of its arrival, so that
	// peers that appear together are not probed together.
	Interval time.Duration
	// Timeout of one connection attempt; default Interval/2, at most 1 s.
	Timeout time.Duration
	// MaxRate caps the probes per second across all peers (default 20): with many
	// peers a round takes longer than Interval rather than sending a burst.
	MaxRate float64
	// Jitter is the fraction by which each interval varies (default 0.2).
	Jitter float64
	// Dial connects to a peer and closes the connection; default a TCP connect.
	Dial func(ctx context.Context, address string) error
	// Clock is the time source, timeouts included (tests use a fake one).
	Clock clock.WithDelayedExecution
	// Instance is the discovery's name, the metrics' discovery label (default
	// "epp").
	Instance string
}

func (o *Options) defaults() error {
	if o.Interval <= 0 {
		return fmt.Errorf("probe interval must be positive, got %v", o.Interval)
	}
	if o.Timeout <= 0 {
		o.Timeout = min(o.Interval/2, maxTimeout)
	}
	if o.MaxRate <= 0 {
		o.MaxRate = DefaultMaxRate
	}
	if o.Jitter <= 0 || o.Jitter >= 1 {
		o.Jitter = DefaultJitter
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Instance == "" {
		o.Instance = "epp"
	}
	if o.Dial == nil {
		timeout := o.Timeout
		o.Dial = func(ctx context.Context, address string) error {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, "tcp", address)
			if err != nil {
				return err
			}
			return conn.Close()
		}
	}
	return nil
}

// Status is what the probes of one peer found.
type Status struct {
	// Probed is false until the first probe of the peer completed.
	Probed bool
	// Reachable: the last probe connected.
	Reachable bool
	// LastProbe is when the last probe started.
	LastProbe time.Time
	// ConnectTime is how long the last successful connection took.
	ConnectTime time.Duration
	// Error is the last probe's error ("" when it connected).
	Error string
}

// Prober probes the peers of a peer store. Create it with New and run it with Run.
type Prober struct {
	opts    Options
	log     logr.Logger
	limiter *limiter
	metrics *metrics.Probing

	mu      sync.Mutex
	peers   map[string]*tracked // by peer ID
	gen     uint64              // moves with every probe result
	changed chan struct{}       // closed and replaced when a peer's Probed or Reachable changes
}

// tracked is one peer being probed.
type tracked struct {
	address string
	cancel  context.CancelFunc
	status  Status
}

// New returns a Prober for opts.
func New(opts Options, log logr.Logger) (*Prober, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return &Prober{opts: opts, log: log, peers: map[string]*tracked{}, changed: make(chan struct{}), metrics: metrics.ProbingFor(opts.Instance),
		limiter: &limiter{clock: opts.Clock, every: time.Duration(float64(time.Second) / opts.MaxRate)}}, nil
}

// Run probes the peers of store, following its changes, until ctx ends.
func (p *Prober) Run(ctx context.Context, store peers.Reader) error {
	var wg sync.WaitGroup
	defer func() {
		p.mu.Lock()
		for id, t := range p.peers {
			t.cancel()
			delete(p.peers, id)
		}
		p.mu.Unlock()
		wg.Wait()
		p.metrics.Unreachable.Set(0)
	}()
	snap := store.Snapshot()
	for {
		p.follow(ctx, snap.Peers, &wg)
		var err error
		if snap, err = store.WaitForChange(ctx, snap.Version); err != nil {
			return nil // ctx ended
		}
	}
}

// follow starts probing new peers (and peers whose address changed) and stops
// probing those that left.
func (p *Prober) follow(ctx context.Context, set []peers.PeerMetadata, wg *sync.WaitGroup) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := make(map[string]string, len(set))
	for _, peer := range set {
		want[peer.ID()] = peer.HostPort()
	}
	changed := false
	for id, t := range p.peers {
		if addr, ok := want[id]; !ok || addr != t.address {
			t.cancel()
			delete(p.peers, id)
			changed = true
		}
	}
	for id, addr := range want {
		if _, ok := p.peers[id]; ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		p.peers[id] = &tracked{address: addr, cancel: cancel}
		wg.Go(func() { p.probeLoop(pctx, id, addr) })
	}
	if changed {
		p.bumpLocked(true)
	}
	p.updateGaugeLocked()
}

// probeLoop probes one peer until ctx ends (the peer left, or the prober stops).
// Its probes are sequential: at most one in flight per peer.
func (p *Prober) probeLoop(ctx context.Context, id, address string) {
	delay := time.Duration(rand.Float64() * float64(p.opts.Interval))
	for {
		if !p.sleep(ctx, delay) || !p.limiter.wait(ctx) {
			return
		}
		start := p.opts.Clock.Now()
		dctx, cancel := context.WithCancel(ctx)
		timeout := p.opts.Clock.AfterFunc(p.opts.Timeout, cancel)
		err := p.opts.Dial(dctx, address)
		timeout.Stop()
		timedOut := dctx.Err() != nil
		cancel()
		took := p.opts.Clock.Since(start)
		if ctx.Err() != nil {
			return // the peer left while it was probed: its result is of no use
		}
		if timedOut && err != nil {
			err = context.DeadlineExceeded
		}
		p.record(id, address, start, took, err)
		delay = time.Duration(float64(p.opts.Interval) * (1 - p.opts.Jitter + 2*p.opts.Jitter*rand.Float64()))
	}
}

func (p *Prober) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-p.opts.Clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *Prober) record(id, address string, start time.Time, took time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.peers[id]
	if !ok || t.address != address {
		return // left meanwhile
	}
	prev := t.status
	t.status = Status{Probed: true, Reachable: err == nil, LastProbe: start}
	if err == nil {
		t.status.ConnectTime = took
		p.metrics.ConnectSeconds.Observe(took.Seconds())
		p.metrics.OK.Inc()
	} else {
		t.status.Error = probeError(err)
		p.metrics.Failed.Inc()
	}
	flipped := prev.Probed != t.status.Probed || prev.Reachable != t.status.Reachable
	if flipped {
		if err != nil {
			p.log.Info("peer unreachable", "peer", id, "address", address, "error", t.status.Error)
		} else if prev.Probed {
			p.log.Info("peer reachable again", "peer", id, "address", address)
		}
		p.updateGaugeLocked()
	}
	p.bumpLocked(flipped)
}

// probeError is the error of a probe in a word where there is one: "timeout" (no
// answer: a black hole, a policy that drops), "refused" (nothing listens, or a
// firewall rejects), "unreachable" (no route); else the error's text.
func probeError(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	default:
		return err.Error()
	}
}

func (p *Prober) bumpLocked(flipped bool) {
	p.gen++
	if flipped {
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

func (p *Prober) updateGaugeLocked() {
	n := 0
	for _, t := range p.peers {
		if t.status.Probed && !t.status.Reachable {
			n++
		}
	}
	p.metrics.Unreachable.Set(float64(n))
}

// Status returns what is known of the peer with this ID; false when the peer is not
// being probed.
func (p *Prober) Status(id string) (Status, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.peers[id]
	if !ok {
		return Status{}, false
	}
	return t.status, true
}

// Generation moves with every probe result; the channel is closed when a peer's
// reachability changes (or a peer is no longer probed), for writers that should not
// follow every probe.
func (p *Prober) Generation() (gen uint64, flipped <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen, p.changed
}

// limiter spaces probes across all peers: one every 1/MaxRate, reserved in order.
type limiter struct {
	clock clock.Clock
	every time.Duration
	mu    sync.Mutex
	next  time.Time
}

func (l *limiter) wait(ctx context.Context) bool {
	l.mu.Lock()
	now := l.clock.Now()
	at := l.next
	if at.Before(now) {
		at = now
	}
	l.next = at.Add(l.every)
	l.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		select {
		case <-l.clock.After(d):
		case <-ctx.Done():
			return false
		}
	}
	return ctx.Err() == nil
}

// AnswerLine is the line a replica writes first on each connection to its peer-sync
// port, naming it (id: namespace/name), whether Answer or a state syncer listens
// there: a probe needs only the connection, and a peer that dials checks the name.
func AnswerLine(id string) string { return "epp-peer-discovery " + id + "\n" }

// Answer accepts connections on l and answers each with line (AnswerLine), then
// closes it, until ctx ends (nil) or accepting fails: what a probe of another replica
// needs to find this one reachable where nothing else listens on the peer-sync port.
// It is not a state sync.
func Answer(ctx context.Context, l net.Listener, line string) error {
	b := []byte(line)
	return Accept(ctx, l, func(conn net.Conn) {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write(b)
		_ = conn.Close()
	})
}

// Accept hands each connection accepted on l to handle (which owns it) until ctx
// ends (nil; l is closed then) or l is closed by someone else (net.ErrClosed). No
// other error ends it: one that a listener may recover from (too many open files,
// a connection aborted before it was accepted) is passed to each onError and
// retried after a backoff from 5 ms, doubling to 1 s, as net/http's Server does, so
// that one bad moment never stops a replica's port for good.
func Accept(ctx context.Context, l net.Listener, handle func(net.Conn), onError ...func(error)) error {
	go func() { <-ctx.Done(); l.Close() }()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err == nil {
			backoff = 0
			handle(conn)
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, net.ErrClosed) {
			return err
		}
		for _, f := range onError {
			f(err)
		}
		backoff = acceptBackoff(backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// acceptBackoff is the wait after an accept error that followed a wait of last.
func acceptBackoff(last time.Duration) time.Duration {
	if last == 0 {
		return 5 * time.Millisecond
	}
	return min(2*last, time.Second)
}
