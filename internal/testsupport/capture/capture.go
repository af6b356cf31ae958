// Package capture collects what a test's subjects write (a process's stdout and
// stderr, a logr logger's lines) so that the test can assert on it; safe for
// concurrent writers.
package capture

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Buffer is a bytes.Buffer that many goroutines (or a process's stdout and stderr)
// may write at once. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Logger is a logr.Logger that writes one line per entry into b (its prefix, then
// its key/value pairs).
func (b *Buffer) Logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(b, prefix, args)
	}, funcr.Options{})
}
