package reachability

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
)

// TestProbeErrorWords: the reasons /debug/peers gives, from real dials on 127.0.0.1
// where the kernel can produce them, and from wrapped errors where it cannot here.
func TestProbeErrorWords(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	o := Options{Interval: 1e9}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a real dial to a closed port", o.Dial(context.Background(), closed), "refused"},
		{"cancelled by the timeout", fmt.Errorf("dial: %w", context.DeadlineExceeded), "timeout"},
		{"no route", &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.EHOSTUNREACH)}, "unreachable"},
		{"network down", &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ENETUNREACH)}, "unreachable"},
		{"anything else", fmt.Errorf("dial tcp: lookup x: no such host"), "dial tcp: lookup x: no such host"},
	} {
		if tc.err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		if got := probeError(tc.err); got != tc.want {
			t.Errorf("%s: %q (from %v), want %q", tc.name, got, tc.err, tc.want)
		}
	}
}
