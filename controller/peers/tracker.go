package peers

import "sync"

// Tracker remembers the peer set it published last and sends a PeerNotifier only
// what changed. Publishing the same set twice sends nothing. It is safe for
// concurrent use; concurrent Publish calls are serialized.
type Tracker struct {
	mu       sync.Mutex
	notifier PeerNotifier
	last     []PeerMetadata
}

// NewTracker returns a Tracker that starts from an empty set.
func NewTracker(n PeerNotifier) *Tracker { return &Tracker{notifier: n} }

// Publish makes cur the published set and returns the change it sent.
func (t *Tracker) Publish(cur []PeerMetadata) Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Diff(t.last, cur)
	if c.Empty() {
		return c
	}
	c.Apply(t.notifier)
	t.last = append(t.last[:0:0], cur...)
	return c
}

// Notifier is the notifier the tracker sends to.
func (t *Tracker) Notifier() PeerNotifier { return t.notifier }
