package endpointslice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/metrics"
)

// runOwn runs the source's own reflector and watches over it:
//
//   - A reflector lists and watches the Service's slices (scoped by namespace and
//     label); its first list makes the source synced.
//   - Once it has listed, a health check lists one slice through the same
//     connection every ProbeInterval (±20%), with a ProbeTimeout. A check that fails
//     (connection refused or reset, a timeout — a black-holed connection —, a TLS
//     error, a 5xx, a 401 or 403) makes the view stale: the reflector stops, the
//     last good set stays, and /debug/peers, the epp_peer_discovery_stale gauge and
//     one log line say so.
//   - While stale, the check runs over a new connection each time (so a connection
//     that went dead is not reused), after StaleProbeInterval and then up to twice
//     it (1 s, then 1.5 s, then 2 s by default), jittered by ±50%: one request per
//     replica per interval, never more, so an outage of every replica's API server
//     is a steady trickle of checks, not a burst of retries. When the API server answers, a new reflector
//     on a new connection lists at once (no backoff to wait out); its list replaces
//     the set, so slices deleted during the outage leave, and the view is fresh.
func (s *Source) runOwn(ctx context.Context) error {
	for {
		client, err := newClientset(s.opts.RESTConfig)
		if err != nil {
			return err
		}
		rctx, stop := context.WithCancel(ctx)
		listed := s.startReflector(rctx, client)
		select {
		case <-ctx.Done():
			stop()
			client.close()
			return nil
		case <-listed:
		}
		s.pub.ClearStale() // a no-op unless this reflector follows an outage (its list published it already)
		err = s.checkUntilFailure(ctx, client)
		stop()
		client.close()
		if ctx.Err() != nil {
			return nil
		}
		s.failCheck(err)
		if !s.waitReachable(ctx) {
			return nil
		}
	}
}

// startReflector runs a reflector on client until ctx ends; the returned channel is
// closed by its first list.
func (s *Source) startReflector(ctx context.Context, client kubernetes.Interface) <-chan struct{} {
	s.mu.Lock()
	s.gen++
	sk := &sink{s: s, gen: s.gen, listed: make(chan struct{})}
	s.mu.Unlock()
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.cfg.Service}).String()
	slices := client.DiscoveryV1().EndpointSlices(s.cfg.Namespace)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return slices.Watch(ctx, o)
		},
	}
	// Retries of a failing list back off from 0.5 s to 5 s (with jitter: at most
	// 10 s), not client-go's 30 s: a replica that could not list at start (no Role
	// yet) follows the fix quickly.
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 10, Cap: 5 * time.Second}
	r := toolscache.NewReflectorWithOptions(lw, &discoveryv1.EndpointSlice{}, sk, toolscache.ReflectorOptions{
		Name: "epp-peer-discovery", Backoff: &backoff,
	})
	go func() {
		_ = backoff.DelayWithReset(clock.RealClock{}, 2*time.Minute).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
			if err := r.ListAndWatchWithContext(ctx); err != nil && ctx.Err() == nil {
				s.reportError(err)
			}
			return false, nil
		})
	}()
	return sk.listed
}

// sink is a reflector's store: it applies the slices to the source's state, and
// drops what a stopped reflector still sends.
type sink struct {
	s      *Source
	gen    uint64
	listed chan struct{}
	once   bool
}

func (k *sink) lock() bool {
	k.s.mu.Lock()
	if k.s.gen != k.gen {
		k.s.mu.Unlock()
		return false
	}
	return true
}

func (k *sink) Add(obj any) error { return k.Update(obj) }
func (k *sink) Resync() error     { return nil }
func (k *sink) Update(obj any) error {
	sl, ok := sliceOf(obj)
	if !ok || !k.lock() {
		return nil
	}
	defer k.s.mu.Unlock()
	k.s.upsertLocked(sl)
	return nil
}

func (k *sink) Delete(obj any) error {
	sl, ok := sliceOf(obj)
	if !ok || !k.lock() {
		return nil
	}
	defer k.s.mu.Unlock()
	k.s.deleteLocked(sl)
	return nil
}

func (k *sink) Replace(list []any, _ string) error {
	all := make([]discoveryv1.EndpointSlice, 0, len(list))
	for _, o := range list {
		if sl, ok := sliceOf(o); ok {
			all = append(all, *sl)
		}
	}
	if !k.lock() {
		return nil
	}
	defer k.s.mu.Unlock()
	k.s.replaceLocked(all)
	k.s.markSyncedLocked()
	if !k.once {
		k.once = true
		close(k.listed)
	}
	return nil
}

// checkUntilFailure checks the API server through client every ProbeInterval
// (±20%) until a check fails (its error) or ctx ends (ctx.Err()).
func (s *Source) checkUntilFailure(ctx context.Context, client kubernetes.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(jitter(s.opts.ProbeInterval, 0.2)):
		}
		if err := s.check(ctx, client); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// failCheck reports a failed check with its cause (Classify); a forbidden one names
// the missing permission.
func (s *Source) failCheck(err error) {
	reason := Classify(err)
	if reason == metrics.ReasonForbidden {
		err = s.forbidden(err)
	}
	s.pub.Fail(reason, err)
}

// waitReachable checks, over a new connection each time, until the API server
// answers (true) or ctx ends (false): first after StaleProbeInterval, then 1.5 times
// longer each time up to twice it, always jittered by ±50%, so that replicas that
// lost the API server together never retry together. Every failed check is
// reported (Publisher.Fail), so the reason and error shown are the latest.
func (s *Source) waitReachable(ctx context.Context) bool {
	interval := s.opts.StaleProbeInterval
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(jitter(interval, 0.5)):
		}
		interval = min(interval*3/2, 2*s.opts.StaleProbeInterval)
		client, err := newClientset(s.opts.RESTConfig)
		if err == nil {
			err = s.check(ctx, client)
			client.close()
		}
		if err == nil {
			return true
		}
		if ctx.Err() == nil {
			s.failCheck(err)
		}
	}
}

// check lists at most one of the Service's slices: the API server is reachable,
// healthy, and still lets this replica read the slices.
func (s *Source) check(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
	defer cancel()
	_, err := client.DiscoveryV1().EndpointSlices(s.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + s.cfg.Service, Limit: 1,
	})
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{err}
	}
	return err
}

type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return "no answer within the probe timeout: " + e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// Classify names the cause of a failed check or list: forbidden, unauthorized,
// refused, reset, tls, server-error, timeout, or other. A timeout that ended retries
// of a refused or reset connection is named after them.
func Classify(err error) string {
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	msg := err.Error()
	switch {
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(msg, "connection refused"):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), strings.Contains(msg, "connection reset"),
		strings.Contains(msg, "broken pipe"), strings.Contains(msg, "http2: client connection lost"):
		return "reset"
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recordErr),
		strings.Contains(msg, "tls:"), strings.Contains(msg, "x509:"):
		return "tls"
	case errors.As(err, new(*timeoutError)), errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return "timeout" // before server errors: the API server's own timeouts are 504s
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err),
		apierrors.IsUnexpectedServerError(err), isServerError(err):
		return "server-error"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	}
	return "other"
}

func isServerError(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code >= 500
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// jitter returns d scaled by a random factor in [1-f, 1+f].
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}

// conn is a clientset with a transport of its own.
type conn struct {
	kubernetes.Interface
	http *http.Client
}

// close closes the transport's idle connections.
func (c conn) close() { c.http.CloseIdleConnections() }

// newClientset returns a clientset with a transport of its own: new connections,
// never the ones a previous reflector may have left dead. (client-go shares one
// transport among equal configs; a config with its own dialer is never shared.)
func newClientset(cfg *rest.Config) (conn, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return conn{}, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return conn{}, err
	}
	return conn{Interface: cs, http: httpClient}, nil
}
