package discovery

import (
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

var _ Status = (*Publisher)(nil)

// Publisher turns a source's complete peer sets into changes for a notifier, and
// records the source's status. It is safe for concurrent use.
type Publisher struct {
	source  string
	tracker *peers.Tracker
	log     logr.Logger
	now     func() time.Time

	status    peers.SourceStatus
	ready     chan struct{}
	readyOnce sync.Once
}

// NewPublisher returns a Publisher for the source named source ("endpointslice",
// "file", ...) that sends changes to n and logs with log.
func NewPublisher(source string, n peers.PeerNotifier, log logr.Logger) *Publisher {
	return &Publisher{source: source, tracker: peers.NewTracker(n), log: log, now: time.Now, ready: make(chan struct{})}
}

// Name is the name of the source that publishes here.
func (p *Publisher) Name() string { return p.source }

// Publish makes set the published peer set: the difference to the last one goes to
// the notifier, the metrics and the log. The first Publish marks the source synced
// and closes Ready. It returns the change it sent.
func (p *Publisher) Publish(set []peers.PeerMetadata) peers.Change {
	change := p.tracker.Publish(set)
	now := p.now()
	metrics.ObserveChange(change, len(set), now)
	if !change.Empty() {
		p.log.Info("peer set changed", "peers", len(set), "upserted", ids(change.Upserts), "deleted", change.Deletes)
	}
	if p.status.MarkSynced(now) {
		metrics.Synced.Set(1)
		p.readyOnce.Do(func() { close(p.ready) })
		p.log.Info("peer discovery synced", "source", p.source, "peers", len(set))
	}
	return change
}

// Fail records err as the source's last error: counted in
// epp_peer_discovery_errors_total{reason}, logged, and shown by /readyz until the
// next successful Publish. The published set stays as it is.
func (p *Publisher) Fail(reason string, err error) {
	metrics.Errors.WithLabelValues(reason).Inc()
	p.status.SetError(err)
	p.log.Error(err, "peer discovery error", "source", p.source, "reason", reason)
}

// Len is the size of the published set.
func (p *Publisher) Len() int { return p.tracker.Len() }

// Ready is closed once the first complete set was published.
func (p *Publisher) Ready() <-chan struct{} { return p.ready }

// Synced reports whether the first complete set was published.
func (p *Publisher) Synced() bool { return p.status.Synced() }

// SyncedAt is when the first complete set was published (zero before).
func (p *Publisher) SyncedAt() time.Time { return p.status.SyncedAt() }

// LastError is the last error recorded by Fail, nil after a successful Publish.
func (p *Publisher) LastError() error { return p.status.LastError() }

func ids(ps []peers.PeerMetadata) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID()
	}
	return out
}
