package debugpeers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
)

// WriteSnapshots writes the document to path once the source has synced (at once
// with peer discovery off) and after every change of the set, its status (stale or
// fresh, the last error) or a peer's reachability (not every probe's time, which
// would rewrite the file continuously; the GET serves those). A failed write is
// logged, counted in epp_peer_discovery_errors_total{reason="snapshot"} and retried
// every second until it succeeds or a newer document supersedes it. When ctx ends it
// writes the document once more, so the file left behind is the last view; it
// returns the error of that last write, if any.
func (v *View) WriteSnapshots(ctx context.Context, path string, log logr.Logger) error {
	failed := func(err error) {
		v.snapshotErrors().Inc()
		log.Error(err, "writing the peer snapshot failed", "flag", "--epp-peer-snapshot-file", "path", path)
	}
	if v.pub != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-v.pub.Ready():
		}
	}
	for {
		changed, flipped := v.changed()
		if err := WriteFileAtomic(path, v.JSON()); err != nil {
			failed(err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
				continue
			}
		}
		select {
		case <-ctx.Done():
			if err := WriteFileAtomic(path, v.JSON()); err != nil {
				failed(err)
				return errors.Join(errors.New("writing the final peer snapshot"), err)
			}
			return nil
		case <-changed: // nil with peer discovery off: the document never changes
		case <-flipped:
		}
	}
}

// snapshotErrors counts failed writes: under the discovery's label, or "off" with
// peer discovery off.
func (v *View) snapshotErrors() prometheus.Counter {
	if v.pub != nil {
		return v.pub.Metrics().Errors(metrics.ReasonSnapshot)
	}
	return metrics.Errors("off", metrics.ReasonSnapshot)
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
