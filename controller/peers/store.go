package peers

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Snapshot is the peer set at one point in time.
type Snapshot struct {
	// Version increases by one with every change; the empty initial set is version 0.
	Version uint64
	// Peers ordered by ID; never nil. Shared by every snapshot of this version: do not
	// modify it (Peers() returns a copy of your own).
	Peers []PeerMetadata
	// UpdatedAt is when the last change was applied (zero before the first).
	UpdatedAt time.Time
}

// MemoryPeerStore is an in-memory PeerStore. It is safe for concurrent use, returns
// peers ordered by ID, and lets consumers wait for changes with WaitForChange, which
// coalesces: a consumer that is slower than the changes sees the newest set, never a
// queue of stale ones.
type MemoryPeerStore struct {
	now func() time.Time

	mu        sync.Mutex
	peers     map[string]PeerMetadata
	version   uint64
	updated   time.Time
	changed   chan struct{}  // closed and replaced on every change
	sorted    []PeerMetadata // the peers of version sortedAt, ordered; built on demand
	sortedAt  uint64
	hasSorted bool
	edits     []sortedEdit   // changes since sortedAt, in order
	log       []loggedChange // the last changes, one per version, oldest first
}

// loggedChange is what one version changed (only what it really changed).
type loggedChange struct {
	version uint64
	change  Change
}

// maxLoggedChanges bounds the changes a follower takes one version at a time; one
// that falls further behind compares the whole set once instead.
const maxLoggedChanges = 64

// sortedEdit is one change of one peer since the ordered view was built.
type sortedEdit struct {
	p       PeerMetadata
	deleted bool
}

var (
	_ PeerStore     = (*MemoryPeerStore)(nil)
	_ BatchNotifier = (*MemoryPeerStore)(nil)
	_ Reader        = (*MemoryPeerStore)(nil)
)

// Reader reads a MemoryPeerStore without changing it: what a consumer gets when the
// store belongs to someone else.
type Reader interface {
	// Peers returns the current peers ordered by ID. The caller owns the slice.
	Peers() []PeerMetadata
	// Peer returns the peer with this ID.
	Peer(id string) (PeerMetadata, bool)
	// Snapshot returns the current set and its version.
	Snapshot() Snapshot
	// WaitForChange blocks until the version is greater than after (see
	// MemoryPeerStore.WaitForChange).
	WaitForChange(ctx context.Context, after uint64) (Snapshot, error)
}

// NewMemoryPeerStore returns an empty store.
func NewMemoryPeerStore() *MemoryPeerStore {
	return &MemoryPeerStore{now: time.Now, peers: map[string]PeerMetadata{}, changed: make(chan struct{})}
}

// UpsertPeer implements PeerNotifier.
func (s *MemoryPeerStore) UpsertPeer(p PeerMetadata) {
	s.ApplyPeerChange(Change{Upserts: []PeerMetadata{p}})
}

// DeletePeer implements PeerNotifier.
func (s *MemoryPeerStore) DeletePeer(id string) {
	s.ApplyPeerChange(Change{Deletes: []string{id}})
}

// ApplyPeerChange implements BatchNotifier: readers see all of c or none of it.
// A change that changes nothing does not create a new version.
func (s *MemoryPeerStore) ApplyPeerChange(c Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var eff Change
	for _, id := range c.Deletes {
		if prev, ok := s.peers[id]; ok {
			delete(s.peers, id)
			eff.Deletes = append(eff.Deletes, id)
			s.noteEdit(prev, true)
		}
	}
	for _, p := range c.Upserts {
		id := p.ID()
		if prev, ok := s.peers[id]; !ok || prev != p {
			s.peers[id] = p
			eff.Upserts = append(eff.Upserts, p)
			s.noteEdit(p, false)
		}
	}
	if eff.Empty() {
		return
	}
	s.version++
	if len(s.log) == maxLoggedChanges {
		s.log = slices.Delete(s.log, 0, 1)
	}
	s.log = append(s.log, loggedChange{version: s.version, change: eff})
	s.updated = s.now()
	close(s.changed)
	s.changed = make(chan struct{})
}

// noteEdit records a change of one peer for the ordered view: the next read applies
// a few edits to a copy of it (binary search, one move each) instead of ordering
// the whole set again; past maxSortedEdits it orders the set again.
func (s *MemoryPeerStore) noteEdit(p PeerMetadata, deleted bool) {
	if !s.hasSorted {
		return
	}
	if len(s.edits) == maxSortedEdits {
		s.hasSorted, s.edits = false, s.edits[:0]
		return
	}
	s.edits = append(s.edits, sortedEdit{p: p, deleted: deleted})
}

// maxSortedEdits bounds the edits the ordered view takes one by one.
const maxSortedEdits = 64

// Peers implements PeerStore.
func (s *MemoryPeerStore) Peers() []PeerMetadata { return slices.Clone(s.Snapshot().Peers) }

// Peer implements PeerStore.
func (s *MemoryPeerStore) Peer(id string) (PeerMetadata, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.peers[id]
	return p, ok
}

// Snapshot returns the current set and its version.
func (s *MemoryPeerStore) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

// snapshotLocked orders the peers once per version: reading is free until the next
// change, and after a small change costs a copy, not a sort.
func (s *MemoryPeerStore) snapshotLocked() Snapshot {
	switch {
	case !s.hasSorted:
		ps := make([]PeerMetadata, 0, len(s.peers))
		for _, p := range s.peers {
			ps = append(ps, p)
		}
		SortByID(ps)
		s.sorted, s.sortedAt, s.hasSorted = ps, s.version, true
		s.edits = s.edits[:0]
	case s.sortedAt != s.version:
		ps := make([]PeerMetadata, len(s.sorted), len(s.sorted)+len(s.edits))
		copy(ps, s.sorted) // the old view belongs to the snapshots handed out
		for _, e := range s.edits {
			i, found := slices.BinarySearchFunc(ps, e.p, CompareID)
			switch {
			case e.deleted && found:
				ps = slices.Delete(ps, i, i+1)
			case e.deleted:
			case found:
				ps[i] = e.p
			default:
				ps = slices.Insert(ps, i, e.p)
			}
		}
		s.sorted, s.sortedAt = ps, s.version
		s.edits = s.edits[:0]
	}
	return Snapshot{Version: s.version, Peers: s.sorted, UpdatedAt: s.updated}
}

// Follow sends n the current set, then every later change, until ctx ends. Every
// call to n is made from the goroutine that called Follow, in order, so n need not be
// safe for concurrent use. Like WaitForChange it coalesces: a notifier slower than
// the changes receives the net change since its last call (per peer, calls keep the
// order of the changes), never a backlog of stale ones.
func (s *MemoryPeerStore) Follow(ctx context.Context, n PeerNotifier) {
	s.FollowFrom(ctx, n, Snapshot{})
}

// FollowFrom is Follow for a notifier that already holds the snapshot delivered: it
// sends only what changed after it. Each round costs what changed, not the size of
// the set: the store keeps its last changes, and a follower that fell further behind
// than those compares the whole set once.
func (s *MemoryPeerStore) FollowFrom(ctx context.Context, n PeerNotifier, delivered Snapshot) {
	held := make(map[string]PeerMetadata, len(delivered.Peers))
	for _, p := range delivered.Peers {
		held[p.ID()] = p
	}
	version := delivered.Version
	for {
		if err := s.waitVersion(ctx, version); err != nil {
			return
		}
		c, v, ok := s.changesSince(version, held)
		if !ok {
			snap := s.Snapshot()
			c, v = diffHeld(held, snap.Peers), snap.Version
		}
		for _, id := range c.Deletes {
			delete(held, id)
		}
		for _, p := range c.Upserts {
			held[p.ID()] = p
		}
		if !c.Empty() {
			c.Apply(n)
		}
		version = v
	}
}

// waitVersion blocks until the version is greater than after, or ctx ends.
func (s *MemoryPeerStore) waitVersion(ctx context.Context, after uint64) error {
	for {
		s.mu.Lock()
		if s.version > after {
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changesSince returns the net change from version after to the current one against
// held (what the follower holds), and the current version; false when the log no
// longer reaches back to after.
func (s *MemoryPeerStore) changesSince(after uint64, held map[string]PeerMetadata) (Change, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) == 0 || s.log[0].version > after+1 {
		return Change{}, 0, false
	}
	type final struct {
		p       PeerMetadata
		present bool
	}
	last := map[string]final{}
	for _, l := range s.log {
		if l.version <= after {
			continue
		}
		for _, id := range l.change.Deletes {
			last[id] = final{}
		}
		for _, p := range l.change.Upserts {
			last[p.ID()] = final{p: p, present: true}
		}
	}
	var c Change
	for id, f := range last {
		prev, had := held[id]
		switch {
		case !f.present && had:
			c.Deletes = append(c.Deletes, id)
		case f.present && (!had || prev != f.p):
			c.Upserts = append(c.Upserts, f.p)
		}
	}
	SortByID(c.Upserts)
	slices.Sort(c.Deletes)
	return c, s.version, true
}

// diffHeld is Diff from a follower's map to the set cur.
func diffHeld(held map[string]PeerMetadata, cur []PeerMetadata) Change {
	var c Change
	seen := make(map[string]bool, len(cur))
	for _, p := range cur {
		id := p.ID()
		seen[id] = true
		if prev, ok := held[id]; !ok || prev != p {
			c.Upserts = append(c.Upserts, p)
		}
	}
	for id := range held {
		if !seen[id] {
			c.Deletes = append(c.Deletes, id)
		}
	}
	SortByID(c.Upserts)
	slices.Sort(c.Deletes)
	return c
}

// WaitForChange blocks until the store's version is greater than after, then returns
// the newest snapshot. Pass the Version of the last snapshot you handled (0 at first).
// It returns ctx.Err() when ctx ends first.
func (s *MemoryPeerStore) WaitForChange(ctx context.Context, after uint64) (Snapshot, error) {
	for {
		s.mu.Lock()
		if s.version > after {
			snap := s.snapshotLocked()
			s.mu.Unlock()
			return snap, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
}
