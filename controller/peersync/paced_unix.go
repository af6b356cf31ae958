//go:build unix

package peersync

import (
	"io"
	"os"
	"syscall"
)

const canPace = true

// readNow reads what the socket holds without waiting; wait says it holds nothing.
func readNow(raw syscall.RawConn, b []byte) (n int, wait bool, err error) {
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), b)
			if rerr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, false, err
	}
	switch {
	case rerr == syscall.EAGAIN:
		return 0, true, nil
	case rerr != nil:
		return 0, false, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, false, io.EOF
	}
	return n, false, nil
}
