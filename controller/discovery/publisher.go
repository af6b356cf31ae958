package discovery

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

var _ Status = (*Publisher)(nil)

// Publisher is where a source's reads end up, the one place for what every source
// needs besides reading: it turns complete peer sets (or a source's own changes)
// into changes for a notifier, leaves this replica out of them, and keeps the
// source's status with one policy for failures:
//
//   - before the first complete set, a failure keeps the source not ready and is
//     shown as the reason (LastError);
//   - after it, a failure makes the view stale: the last good set is kept, and
//     /debug/peers, the stale gauge and one log line say why, until the next
//     complete read (Publish, PublishChange) or ClearStale.
//
// Every failure is counted in epp_peer_discovery_errors_total{discovery, reason}
// and moves the generation, so what is rendered from the status is never older than
// the last failure. It is safe for concurrent use.
type Publisher struct {
	source  string
	self    peers.Self
	tracker *peers.Tracker
	log     logr.Logger
	metrics *metrics.Discovery
	now     func() time.Time

	status    peers.SourceStatus
	ready     chan struct{}
	readyOnce sync.Once

	mu         sync.Mutex // serializes publishing; guards the fields below
	selfListed *bool      // nil: the source does not say
	size       int
	gen        uint64        // increases with every change of the status or the set
	changed    chan struct{} // closed and replaced when gen moves
	view       staleness
}

// staleness is the staleness of the view (Publisher.Stale).
type staleness struct {
	is     bool
	since  time.Time
	reason string
	err    error
}

// PublisherOptions are the optional settings of a Publisher.
type PublisherOptions struct {
	// Instance names the discovery in its metrics (label discovery) and logs; the
	// source's name by default (NewPeerDiscovery's default is a name of its own).
	// Two discoveries in one process need two names.
	Instance string
	// Self is this replica: left out of every published set and change, whatever
	// the source.
	Self peers.Self
	// Reasons are the failure reasons the source reports; their counters are
	// created at 0.
	Reasons []string
}

// NewPublisher returns a Publisher for the source named source ("endpointslice",
// "file", "dns", ...) that sends changes to n and logs with log.
func NewPublisher(source string, n peers.PeerNotifier, log logr.Logger, opts PublisherOptions) *Publisher {
	if opts.Instance == "" {
		opts.Instance = source
	}
	m := metrics.For(opts.Instance, opts.Reasons...)
	m.Reset()
	return &Publisher{source: source, self: opts.Self, tracker: peers.NewTracker(n), log: log, now: time.Now,
		metrics: m, ready: make(chan struct{}), changed: make(chan struct{})}
}

// Name is the name of the source that publishes here.
func (p *Publisher) Name() string { return p.source }

// Metrics are the metrics of this discovery, for what only the source can measure
// (the slices it holds, how long an update took, propagation delays).
func (p *Publisher) Metrics() *metrics.Discovery { return p.metrics }

// Publish makes set the published peer set, without this replica: the difference
// to the last one goes to the notifier, the metrics and the log. It marks the
// source synced (the first time: closes Ready) and the view fresh. It returns the
// change it sent.
func (p *Publisher) Publish(set []peers.PeerMetadata) peers.Change {
	kept := make([]peers.PeerMetadata, 0, len(set))
	for _, peer := range set {
		if !p.self.Is(peer) {
			kept = append(kept, peer)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	change := p.tracker.Publish(kept)
	p.published(change, len(kept))
	return change
}

// PublishChange sends a change the source computed itself (an incremental source)
// to the notifier, with size the size of the set after it; otherwise as Publish.
// A source uses either Publish or PublishChange, never both.
func (p *Publisher) PublishChange(change peers.Change, size int) {
	if slices.ContainsFunc(change.Upserts, p.self.Is) { // rare: incremental sources leave it out themselves
		kept := make([]peers.PeerMetadata, 0, len(change.Upserts))
		for _, q := range change.Upserts {
			if p.self.Is(q) {
				size--
			} else {
				kept = append(kept, q)
			}
		}
		change.Upserts = kept
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !change.Empty() {
		change.Apply(p.tracker.Notifier())
	}
	p.published(change, size)
}

func (p *Publisher) published(change peers.Change, size int) {
	now := p.now()
	p.size = size
	p.metrics.ObserveChange(change, size, now)
	if !change.Empty() {
		p.bumpLocked()
		p.log.Info("peer set changed", "peers", size, "upserted", ids(change.Upserts), "deleted", abbreviate(change.Deletes))
	}
	if p.status.MarkSynced(now) {
		p.bumpLocked()
		p.metrics.Synced.Set(1)
		p.readyOnce.Do(func() { close(p.ready) })
		p.log.Info("peer discovery synced", "source", p.source, "peers", size)
	}
	p.clearStaleLocked()
}

// SetSelfListed records whether the source's latest read lists this replica itself
// as a member, by the rule it applies to its peers (a source that can tell:
// EndpointSlices, DNS records of ready pods). A replica's peers accept its
// connections only while they list it, so a cross-replica syncer pushes only while
// SelfListed is true. A source that cannot tell (a peers file may leave the replica
// out) never calls it, and SelfListed stays true.
func (p *Publisher) SetSelfListed(listed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.selfListed != nil && *p.selfListed == listed {
		return
	}
	p.selfListed = &listed
	p.bumpLocked()
	p.log.V(1).Info("this replica's own listing changed", "source", p.source, "listed", listed)
}

// SelfListed reports whether the source lists this replica (SetSelfListed; true when
// the source does not say), and a channel closed at the next change of it or of
// anything else the Generation covers.
func (p *Publisher) SelfListed() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.selfListed == nil || *p.selfListed, p.changed
}

// Lists reports whether set lists this replica (by name or address).
func (p *Publisher) Lists(set []peers.PeerMetadata) bool { return slices.ContainsFunc(set, p.self.Is) }

// ObserveRecompute records how long the source took to turn one event into the
// set or change it published (epp_peer_discovery_recompute_duration_seconds).
func (p *Publisher) ObserveRecompute(took time.Duration) { p.metrics.Recompute.Observe(took.Seconds()) }

// Fail records that the source could not read its peers, for reason, with err: it
// is counted, and becomes LastError. Before the first complete set it keeps the
// source not ready (and is logged every time); after it, the view turns stale with
// the last good set kept (logged when it turns stale and when the reason changes).
// The published set never changes.
func (p *Publisher) Fail(reason string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metrics.Errors(reason).Inc()
	p.status.SetError(err)
	p.bumpLocked()
	if !p.status.Synced() {
		p.log.Error(err, "peer discovery error", "source", p.source, "reason", reason)
		return
	}
	if p.view.is {
		if p.view.reason != reason {
			p.log.Error(err, "peer view still stale, for another reason", "source", p.source, "reason", reason, "was", p.view.reason)
		}
		p.view.reason, p.view.err = reason, err
		return
	}
	p.view = staleness{is: true, since: p.now(), reason: reason, err: err}
	p.metrics.Stale.Set(1)
	p.metrics.StaleTransitions(reason).Inc()
	p.log.Error(fmt.Errorf("%s: %w", reason, err), "peer view is stale: keeping the last good set", "source", p.source, "peers", p.size)
}

// ClearStale marks the view fresh again (the source reaches its peers again without
// a change to publish), logging how long it was stale. Publish and PublishChange do
// it too.
func (p *Publisher) ClearStale() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStaleLocked()
}

func (p *Publisher) clearStaleLocked() {
	if !p.view.is {
		return
	}
	took := p.now().Sub(p.view.since)
	p.view = staleness{}
	p.status.SetError(nil)
	p.bumpLocked()
	p.metrics.Stale.Set(0)
	p.log.Info("peer view is fresh again", "source", p.source, "staleFor", took.Round(time.Millisecond).String(), "peers", p.size)
}

// Stale reports whether the view is stale, since when, why, and the last error.
func (p *Publisher) Stale() (stale bool, since time.Time, reason string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view.is, p.view.since, p.view.reason, p.view.err
}

func (p *Publisher) bumpLocked() {
	p.gen++
	close(p.changed)
	p.changed = make(chan struct{})
}

// Generation increases whenever the set or the status (synced, stale, the last
// error) changes: a reader may cache what it renders from them until it moves. The
// channel is closed when it moves next.
func (p *Publisher) Generation() (uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen, p.changed
}

// Len is the size of the published set.
func (p *Publisher) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size
}

// Ready is closed once the first complete set was published.
func (p *Publisher) Ready() <-chan struct{} { return p.ready }

// Synced reports whether the first complete set was published.
func (p *Publisher) Synced() bool { return p.status.Synced() }

// SyncedAt is when the first complete set was published (zero before).
func (p *Publisher) SyncedAt() time.Time { return p.status.SyncedAt() }

// LastError is the last error recorded by Fail, nil after a complete read.
func (p *Publisher) LastError() error { return p.status.LastError() }

// maxLoggedIDs bounds the IDs a "peer set changed" line lists (a re-list of 10,000
// peers must not log 10,000 names).
const maxLoggedIDs = 20

func ids(ps []peers.PeerMetadata) []string {
	out := make([]string, 0, min(len(ps), maxLoggedIDs+1))
	for i, p := range ps {
		if i == maxLoggedIDs {
			out = append(out, fmt.Sprintf("... and %d more", len(ps)-maxLoggedIDs))
			break
		}
		out = append(out, p.ID())
	}
	return out
}

func abbreviate(deleted []string) []string {
	if len(deleted) <= maxLoggedIDs {
		return deleted
	}
	return append(deleted[:maxLoggedIDs:maxLoggedIDs], fmt.Sprintf("... and %d more", len(deleted)-maxLoggedIDs))
}
