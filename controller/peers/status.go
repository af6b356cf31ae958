package peers

import (
	"sync/atomic"
	"time"
)

// SourceStatus is the readiness state a peer source reports: whether (and when) its
// first complete read was published, and the last error it met. Sources embed it; it
// is safe for concurrent use.
type SourceStatus struct {
	synced   atomic.Bool
	syncedAt atomic.Pointer[time.Time]
	lastErr  atomic.Pointer[error]
}

// MarkSynced records the first complete read at now and clears the last error. It
// reports whether this call made the source synced (false when it already was).
func (s *SourceStatus) MarkSynced(now time.Time) bool {
	s.lastErr.Store(nil)
	if s.synced.Load() {
		return false
	}
	s.syncedAt.Store(&now)
	s.synced.Store(true)
	return true
}

// Synced reports whether the first complete read was published.
func (s *SourceStatus) Synced() bool { return s.synced.Load() }

// SyncedAt is when the source synced (zero before).
func (s *SourceStatus) SyncedAt() time.Time {
	if t := s.syncedAt.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// SetError records err as the last error (nil clears it).
func (s *SourceStatus) SetError(err error) {
	if err == nil {
		s.lastErr.Store(nil)
		return
	}
	s.lastErr.Store(&err)
}

// LastError is the last error recorded, nil when there is none.
func (s *SourceStatus) LastError() error {
	if e := s.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}
