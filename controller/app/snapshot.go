package app

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
)

// writeSnapshots writes the /debug/peers document to --epp-peer-snapshot-file once
// the source has synced (at once with peer discovery off) and after every change of
// the set or its status (stale or fresh). A failed write is logged, counted and
// retried every second until it succeeds or a newer document supersedes it. When ctx
// ends it writes the document once more, so the file left behind is the last view.
func (a *App) writeSnapshots(ctx context.Context) error {
	path := a.opts.SnapshotFile
	if a.pub != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-a.pub.Ready():
		}
	}
	for {
		// The file follows the set, the status and the peers' reachability; not
		// every probe's time (the GET serves those), which would rewrite it
		// continuously.
		var changed, flipped <-chan struct{}
		if a.pub != nil {
			_, changed = a.pub.Generation()
		}
		if a.prober != nil {
			_, flipped = a.prober.Generation()
		}
		if err := WriteFileAtomic(path, a.documentJSON()); err != nil {
			metrics.Errors.WithLabelValues(metrics.ReasonSnapshot).Inc()
			a.log.Error(err, "writing the peer snapshot failed; retrying", "flag", "--epp-peer-snapshot-file", "path", path)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-ctx.Done():
			_ = WriteFileAtomic(path, a.documentJSON())
			return nil
		case <-changed: // nil with peer discovery off: the document never changes
		case <-flipped:
		}
	}
}

// WriteFileAtomic replaces path with data so that a reader sees the old or the new
// content, never a mix: it writes a temporary file in the same folder, syncs it and
// renames it over path.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
