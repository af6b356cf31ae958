//go:build e2e

package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
)

// KWOK v0.8.0 has panicked once while it started (seen in this project's CI). A fake
// kubelet that crashes at its first start must cost a restart, not the suite: Start
// starts it again, reports the crash with its cause, and the node becomes Ready.
func TestStartOutlivesAComponentThatCrashesAtItsFirstStart(t *testing.T) {
	bins, err := DefaultBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The first start prints a panic and exits; later ones run the real KWOK.
	script := "#!/bin/sh\nif [ ! -e " + filepath.Join(dir, "crashed") + " ]; then\n  touch " + filepath.Join(dir, "crashed") +
		"\n  echo 'panic: injected at the first start' >&2\n  exit 2\nfi\nexec " + bins.Kwok + " \"$@\"\n"
	bins.Kwok = filepath.Join(dir, "kwok-crashing-once")
	if err := os.WriteFile(bins.Kwok, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var progress capture.Buffer
	c, err := Start(context.Background(), bins, &progress)
	defer c.Stop()
	if err != nil {
		t.Fatalf("Start failed although only the first start crashed: %v\nprogress:\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "kwok exited before the cluster was ready; starting it again (2 of 3)") ||
		!strings.Contains(progress.String(), "panic: injected at the first start") {
		t.Errorf("the crash and the restart are not reported with the panic's cause; progress:\n%s", progress.String())
	}
}
