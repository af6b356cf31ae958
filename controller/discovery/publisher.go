package discovery

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

var _ Status = (*Publisher)(nil)

// Publisher turns a source's peer sets, or its changes, into changes for a notifier,
// and records the source's status: synced, the last error, and whether the view is
// stale. It is safe for concurrent use.
type Publisher struct {
	source  string
	tracker *peers.Tracker
	log     logr.Logger
	now     func() time.Time

	status    peers.SourceStatus
	ready     chan struct{}
	readyOnce sync.Once

	mu      sync.Mutex // serializes publishing; guards the fields below
	size    int
	gen     uint64        // increases with every change of the status or the set
	changed chan struct{} // closed and replaced when gen moves
	view    staleness
}

// staleness is the staleness of the view (Publisher.Stale).
type staleness struct {
	is     bool
	since  time.Time
	reason string
	err    error
}

// NewPublisher returns a Publisher for the source named source ("endpointslice",
// "file", ...) that sends changes to n and logs with log.
func NewPublisher(source string, n peers.PeerNotifier, log logr.Logger) *Publisher {
	return &Publisher{source: source, tracker: peers.NewTracker(n), log: log, now: time.Now,
		ready: make(chan struct{}), changed: make(chan struct{})}
}

// Name is the name of the source that publishes here.
func (p *Publisher) Name() string { return p.source }

// Publish makes set the published peer set: the difference to the last one goes to
// the notifier, the metrics and the log. The first Publish marks the source synced
// and closes Ready. It returns the change it sent.
func (p *Publisher) Publish(set []peers.PeerMetadata) peers.Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	change := p.tracker.Publish(set)
	p.published(change, len(set))
	return change
}

// PublishChange sends a change the source computed itself (an incremental source)
// to the notifier, with size the size of the set after it; otherwise as Publish.
// A source uses either Publish or PublishChange, never both.
func (p *Publisher) PublishChange(change peers.Change, size int) {
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
	metrics.ObserveChange(change, size, now)
	if !change.Empty() {
		p.bumpLocked()
		p.log.Info("peer set changed", "peers", size, "upserted", ids(change.Upserts), "deleted", abbreviate(change.Deletes))
	}
	if p.status.MarkSynced(now) {
		p.bumpLocked()
		metrics.Synced.Set(1)
		p.readyOnce.Do(func() { close(p.ready) })
		p.log.Info("peer discovery synced", "source", p.source, "peers", size)
	}
}

// Fail records err as the source's last error: counted in
// epp_peer_discovery_errors_total{reason}, logged, and shown by /readyz until the
// next successful Publish. The published set stays as it is.
func (p *Publisher) Fail(reason string, err error) {
	metrics.Errors.WithLabelValues(reason).Inc()
	p.status.SetError(err)
	p.log.Error(err, "peer discovery error", "source", p.source, "reason", reason)
}

// SetStale marks the view stale (the source cannot be read; the last good set is
// kept) with the cause's reason and error. Only the first call of a stale period
// logs, counts and sets the gauge; later ones update the reason and error.
func (p *Publisher) SetStale(reason string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.view.is {
		if p.view.reason != reason {
			p.view.reason, p.view.err = reason, err
			p.bumpLocked()
		}
		p.view.err = err
		return
	}
	p.view = staleness{is: true, since: p.now(), reason: reason, err: err}
	p.bumpLocked()
	metrics.Stale.Set(1)
	metrics.StaleTransitions.WithLabelValues(reason).Inc()
	p.log.Error(fmt.Errorf("%s: %w", reason, err), "peer view is stale: keeping the last good set", "source", p.source, "peers", p.size)
}

// ClearStale marks the view fresh again, logging how long it was stale.
func (p *Publisher) ClearStale() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.view.is {
		return
	}
	took := p.now().Sub(p.view.since)
	p.view = staleness{}
	p.bumpLocked()
	metrics.Stale.Set(0)
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

// Generation increases whenever the set or the status (synced, stale) changes: a
// reader may cache what it renders from them until it moves. The channel is closed
// when it moves next.
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

// LastError is the last error recorded by Fail, nil after a successful Publish.
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
