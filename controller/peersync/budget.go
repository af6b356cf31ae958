package peersync

import (
	"fmt"
	"sync"
	"time"
)

// Defaults of PeerBudget.
const (
	// DefaultPeerBudgetBytesPerSecond is what a peer may cost a replica in a
	// second, on average: about 60 times what a replica routing 600 requests a
	// second publishes, and a shared prefix index of 8 servers at the default
	// capacity repaired whole in under a second.
	DefaultPeerBudgetBytesPerSecond = 8 << 20
	// DefaultPeerBudgetBurstBytes is what it may cost at once: a full state at
	// maxMessageBytes, a stalled connection's backlog, and a shared index of 16
	// servers at the default capacity sent whole to a replica that starts.
	DefaultPeerBudgetBurstBytes = 64 << 20
)

// PeerBudget bounds what one peer may cost this replica, in bytes: every frame it
// sends (states, broadcasts, its requests and answers) and every message sent to
// it alone (Broadcast.SendTo: what a replica answers it). A token bucket per peer,
// kept while the peer is a member (across its reconnections): a peer over it has
// its connections closed and is counted as budget (rejections_total), and what it
// asks next is refused until the bucket refills. So what one admitted peer can
// make this replica send is bounded by the budget, whatever it asks.
type PeerBudget struct {
	// BytesPerSecond refills the bucket (default DefaultPeerBudgetBytesPerSecond).
	BytesPerSecond int
	// BurstBytes is the bucket's size (default DefaultPeerBudgetBurstBytes).
	BurstBytes int
}

func (b *PeerBudget) setDefaults() {
	setDefault(&b.BytesPerSecond, DefaultPeerBudgetBytesPerSecond)
	setDefault(&b.BurstBytes, DefaultPeerBudgetBurstBytes)
}

// check refuses a budget that an honest peer could not keep: less than 1 KiB a
// second, or a burst under two messages at the largest (maxMessageBytes).
func (b PeerBudget) check(maxMessageBytes int) error {
	if b.BytesPerSecond < 1<<10 || b.BurstBytes < 2*maxMessageBytes {
		return fmt.Errorf("peer budget: %d bytes a second (want at least 1 KiB) and a burst of %d bytes (want at least %d: two messages at maxMessageBytes)",
			b.BytesPerSecond, b.BurstBytes, 2*maxMessageBytes)
	}
	return nil
}

// tokenBucket is a peer's budget.
type tokenBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	rate   float64
	burst  float64
}

func (t *tokenBucket) init(b PeerBudget, now time.Time) {
	t.rate, t.burst, t.tokens, t.last = float64(b.BytesPerSecond), float64(b.BurstBytes), float64(b.BurstBytes), now
}

// take takes n bytes, reporting whether they were there.
func (t *tokenBucket) take(n int, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := now.Sub(t.last); d > 0 {
		t.tokens = min(t.burst, t.tokens+d.Seconds()*t.rate)
		t.last = now
	}
	if t.tokens < float64(n) {
		return false
	}
	t.tokens -= float64(n)
	return true
}

// left is what is left of the budget now.
func (t *tokenBucket) left(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return min(t.burst, t.tokens+max(0, now.Sub(t.last).Seconds())*t.rate)
}

// charge takes n bytes of rec's budget; a peer over it is cut off (its
// connections closed, counted as budget), and charge reports false.
func (s *Syncer) charge(rec *peerRec, n int) bool {
	if rec.budget.take(n, s.o.now()) {
		return true
	}
	s.cutOff(rec, RejectBudget, fmt.Sprintf("%d bytes over what is left of its budget (%d bytes a second, %d at once)", n, s.o.PeerBudget.BytesPerSecond, s.o.PeerBudget.BurstBytes))
	return false
}

// cutOff closes rec's connections, both ways, and counts reason: the peer
// misbehaved. It comes back by connecting again, as after any reset.
func (s *Syncer) cutOff(rec *peerRec, reason, why string) {
	s.reject(reason, "cut a peer off: its connections are closed", "peer", rec.id, "why", why)
	s.mu.Lock()
	in, o := rec.in, rec.out
	s.mu.Unlock()
	if in != nil {
		in.conn.Close()
	}
	if o != nil {
		if c := o.conn.Load(); c != nil {
			o.fail(s, c, fmt.Errorf("cut off: %s", reason))
		}
	}
}
