//go:build !unix

package peersync

import "syscall"

// canPace: reading without waiting needs a Unix socket descriptor; elsewhere
// Options.ReadTick has no effect.
const canPace = false

func readNow(syscall.RawConn, []byte) (int, bool, error) { return 0, false, nil }
