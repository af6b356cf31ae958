package kubewatch_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubewatch"
)

func TestClassify(t *testing.T) {
	slices := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	dial := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
	}
	tests := []struct {
		err  error
		want string
	}{
		{apierrors.NewForbidden(slices, "", errors.New("no Role")), "forbidden"},
		{apierrors.NewUnauthorized("token expired"), "unauthorized"},
		{fmt.Errorf("list: %w", dial(syscall.ECONNREFUSED)), "refused"},
		{errors.New(`Get "https://10.0.0.1:6443/apis": dial tcp 10.0.0.1:6443: connect: connection refused`), "refused"},
		{dial(syscall.ECONNRESET), "reset"},
		{dial(syscall.EPIPE), "reset"},
		{errors.New("http2: client connection lost"), "reset"},
		{io.EOF, "reset"},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), "reset"},
		{x509.UnknownAuthorityError{}, "tls"},
		{errors.New("remote error: tls: bad certificate"), "tls"},
		{apierrors.NewInternalError(errors.New("etcd")), "server-error"},
		{apierrors.NewServiceUnavailable("starting"), "server-error"},
		{apierrors.NewTooManyRequests("slow down", 1), "server-error"},
		{context.DeadlineExceeded, "timeout"},
		{apierrors.NewTimeoutError("watch", 1), "timeout"},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, "timeout"},
		{errors.New("something else"), "other"},
	}
	for _, tc := range tests {
		if got := kubewatch.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
