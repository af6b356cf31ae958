package peerfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Debounce is how long a burst of file events must be quiet before the file is read.
const Debounce = 50 * time.Millisecond

// DefaultPollInterval is how often the file is re-read besides fsnotify events.
const DefaultPollInterval = 2 * time.Second

// Source publishes the peers listed in a file, without this replica, to a notifier,
// and keeps doing so as the file changes.
type Source struct {
	path     string
	defaults Defaults
	self     peerset.Self
	selfNS   string
	tracker  *peers.Tracker
	log      logr.Logger
	now      func() time.Time
	// PollInterval is how often the file is re-read even without an event.
	PollInterval time.Duration

	seen     string // what the last read saw: the content or the error
	seenOnce bool
	peers.SourceStatus
}

// NewSource returns a Source for the file at path. Entries without a namespace get
// def.Namespace, entries without a port def.Port; self (in namespace def.Namespace)
// is left out.
func NewSource(path string, def Defaults, self peerset.Self, n peers.PeerNotifier, log logr.Logger) *Source {
	return &Source{
		path: path, defaults: def, self: self, selfNS: def.Namespace,
		tracker: peers.NewTracker(n), log: log, now: time.Now, PollInterval: DefaultPollInterval,
	}
}

// Run loads the file and reloads it on every change until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	dir := filepath.Dir(s.path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("--epp-peer-file: cannot watch files: %w", err)
	}
	defer w.Close()
	watching := false
	watch := func() {
		if watching {
			return
		}
		if err := w.Add(dir); err == nil {
			watching = true
		}
	}
	watch()
	s.reload()
	tick := time.NewTicker(s.PollInterval)
	defer tick.Stop()
	// Events come in bursts (truncate then write, or the several renames of a
	// ConfigMap update): reload once the burst has been quiet for Debounce.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				watching = false // the folder itself went away; re-add on a tick
			}
			settle.Reset(Debounce)
		case <-settle.C:
			s.reload()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Error(err, "watching the peers file's folder failed; polling continues", "dir", dir)
		case <-tick.C:
			watch()
			s.reload()
		}
	}
}

// reload reads the file and acts when what it sees differs from the last read: a
// new content is parsed and published, a bad one or a missing file is logged and
// counted once, not on every poll.
func (s *Source) reload() {
	data, err := readLimited(s.path)
	seen := "data:" + string(data)
	if err != nil {
		seen = "error:" + err.Error()
	}
	if s.seenOnce && seen == s.seen {
		return
	}
	s.seen, s.seenOnce = seen, true
	switch {
	case errors.Is(err, fs.ErrNotExist) && !s.Synced():
		s.fail(metrics.ReasonRead, fmt.Errorf("peers file %s does not exist yet; not ready until it appears", s.path))
		return
	case errors.Is(err, fs.ErrNotExist):
		s.fail(metrics.ReasonRead, fmt.Errorf("peers file %s was removed; keeping the last good set of %d peers", s.path, s.tracker.Len()))
		return
	case err != nil:
		s.fail(metrics.ReasonRead, fmt.Errorf("reading peers file %s: %w; keeping the last good set of %d peers", s.path, err, s.tracker.Len()))
		return
	}
	set, err := Parse(data, s.defaults)
	if err != nil {
		s.fail(metrics.ReasonParse, fmt.Errorf("peers file %s rejected, keeping the last good set of %d peers: %w", s.path, s.tracker.Len(), err))
		return
	}
	kept := set[:0]
	for _, p := range set {
		if !s.self.IsSelf(s.selfNS, p) {
			kept = append(kept, p)
		}
	}
	change := s.tracker.Publish(kept)
	metrics.ObserveChange(change, len(kept), s.now())
	if !change.Empty() {
		s.log.Info("peer set changed", "file", s.path, "peers", len(kept), "upserted", ids(change.Upserts), "deleted", change.Deletes)
	}
	if s.MarkSynced(s.now()) {
		metrics.Synced.Set(1)
		s.log.Info("peer discovery synced", "file", s.path, "peers", len(kept))
	}
}

func (s *Source) fail(reason string, err error) {
	metrics.Errors.WithLabelValues(reason).Inc()
	s.SetError(err)
	s.log.Error(err, "peers file not loaded", "file", s.path)
}

// readLimited reads at most MaxSize+1 bytes, so that an oversized file is detected
// without reading all of it.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxSize+1))
}

func ids(ps []peers.PeerMetadata) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID()
	}
	return out
}
