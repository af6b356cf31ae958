package peerfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Debounce is how long a burst of file events must be quiet before the file is read.
const Debounce = 50 * time.Millisecond

// DefaultPollInterval is how often the file is re-read besides fsnotify events.
const DefaultPollInterval = 2 * time.Second

// Config says which file to read and how to turn its entries into peers.
type Config struct {
	// Path of the peers file.
	Path string
	// Defaults fill what entries leave out.
	Defaults Defaults
	// Membership says which entries are peers by their ready and terminating fields
	// ("" is peers.MembershipReady; entries without them are ready).
	Membership peers.Membership
	// PollInterval is how often the file is re-read even without an event;
	// DefaultPollInterval when zero or negative.
	PollInterval time.Duration
}

// Source is the peers-file peer source (a discovery.Source): it publishes the
// peers listed in a file (its Publisher leaves this replica out) and keeps doing so
// as the file changes.
type Source struct {
	cfg Config
	pub *discovery.Publisher
	log logr.Logger

	seen     string // what the last read saw: the content or the error
	seenOnce bool
	reads    atomic.Uint64 // reads of the file, for tests
}

var _ discovery.Source = (*Source)(nil)

// NewSource returns a Source for cfg, publishing through pub.
func NewSource(cfg Config, pub *discovery.Publisher, log logr.Logger) *Source {
	if cfg.Membership == "" {
		cfg.Membership = peers.MembershipReady
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	return &Source{cfg: cfg, pub: pub, log: log.WithValues("file", cfg.Path)}
}

// Run loads the file and reloads it on every change until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	dir := filepath.Dir(s.cfg.Path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("peers file %s: cannot watch files: %w", s.cfg.Path, err)
	}
	defer w.Close()
	watching := false
	var watchErr string // the last failure to watch, logged once
	watch := func() {
		if watching {
			return
		}
		err := w.Add(dir)
		switch {
		case err == nil:
			watching = true
			if watchErr != "" {
				s.log.Info("watching the peers file's folder again", "dir", dir)
				watchErr = ""
			}
		case err.Error() != watchErr:
			watchErr = err.Error()
			s.log.Error(err, "cannot watch the peers file's folder; reading the file every poll interval instead", "dir", dir, "pollInterval", s.cfg.PollInterval.String())
		}
	}
	watch()
	s.reload()
	tick := time.NewTicker(s.cfg.PollInterval)
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
	path := s.cfg.Path
	data, err := readLimited(path)
	s.reads.Add(1)
	seen := "data:" + string(data)
	if err != nil {
		seen = "error:" + err.Error()
	}
	if s.seenOnce && seen == s.seen {
		return
	}
	s.seen, s.seenOnce = seen, true
	switch {
	case errors.Is(err, fs.ErrNotExist) && !s.pub.Synced():
		s.pub.Fail(metrics.ReasonRead, fmt.Errorf("peers file %s does not exist yet; not ready until it appears", path))
		return
	case errors.Is(err, fs.ErrNotExist):
		s.pub.Fail(metrics.ReasonRead, fmt.Errorf("peers file %s was removed; keeping the last good set of %d peers", path, s.pub.Len()))
		return
	case err != nil:
		s.pub.Fail(metrics.ReasonRead, fmt.Errorf("reading peers file %s: %w; keeping the last good set of %d peers", path, err, s.pub.Len()))
		return
	}
	start := time.Now()
	set, err := Parse(data, s.cfg.Defaults)
	if err != nil {
		s.pub.Fail(metrics.ReasonParse, fmt.Errorf("peers file %s rejected, keeping the last good set of %d peers: %w", path, s.pub.Len(), err))
		return
	}
	kept := set[:0]
	for _, p := range set {
		if s.cfg.Membership.Admits(p.Ready, p.Terminating) {
			kept = append(kept, p)
		}
	}
	s.pub.ObserveRecompute(time.Since(start))
	s.pub.Publish(kept) // leaves this replica out
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
