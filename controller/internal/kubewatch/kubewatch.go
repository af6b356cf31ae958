// Package kubewatch keeps a peer source's list of one kind of Kubernetes object (in
// one namespace, selected by labels) with a client-go reflector of its own, and
// watches over its connection to the API server:
//
//   - A reflector lists and watches the objects (scoped by namespace and label
//     selector); each of its lists reaches the Handler whole (Replace), then every
//     event (Upsert, Delete), from one goroutine at a time.
//   - Once it has listed, a health check lists one object through the same
//     connection every ProbeInterval (±20%), with a ProbeTimeout. A check that fails
//     (connection refused or reset, a timeout — a black-holed connection —, a TLS
//     error, a 5xx, a 401 or 403) makes the view stale (Publisher.Fail): the
//     reflector stops, the last good set stays, and /debug/peers, the
//     epp_peer_discovery_stale gauge and one log line say so.
//   - While stale, the check runs over a new connection each time (so a connection
//     that went dead is not reused), after StaleProbeInterval and then up to twice
//     it (1 s, then 1.5 s, then 2 s by default), jittered by ±50%: one request per
//     replica per interval, never more, so an outage of every replica's API server
//     is a steady trickle of checks, not a burst of retries. When the API server
//     answers, a new reflector on a new connection lists at once (no backoff to wait
//     out); its list replaces the set, so objects deleted during the outage leave,
//     and the view is fresh.
//
// A failed list or watch is reported with its cause (Classify); a forbidden one
// names the missing permission. Retries of a failing list back off from 0.5 s to
// 5 s, so a replica that could not list at start (no Role yet) follows the fix
// quickly. The EndpointSlice and pod sources run on it.
package kubewatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
)

// Reasons are the failure reasons a source on a Watch reports: a missing Role, a
// failed list or watch, and the causes of a failed API server check (Classify).
var Reasons = []string{metrics.ReasonForbidden, metrics.ReasonWatch,
	"unauthorized", "refused", "reset", "tls", "server-error", "timeout", "other"}

// Target is what a Watch lists and watches: one resource in one namespace,
// selected by labels.
type Target struct {
	// Group and Resource name the objects in messages: the RBAC a missing
	// permission needs ("discovery.k8s.io" "endpointslices"; "" "pods").
	Group, Resource string
	// Namespace of the objects.
	Namespace string
	// Selector is a label selector ("" selects every object of the namespace).
	Selector string
	// Object is an empty object of the kind (&corev1.Pod{}).
	Object runtime.Object
	// List and Watch list and watch the objects through a clientset (the selector
	// is set in the options).
	List  func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error)
	Watch func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error)
}

func (t Target) rbac() string {
	if t.Group == "" {
		return t.Resource
	}
	return t.Group + " " + t.Resource
}

// Handler receives what the reflector lists and watches, from one goroutine at a
// time: a whole list (the first one, and the first after each reconnection), then
// every event. Objects are the Target's kind.
type Handler interface {
	Replace(objs []any)
	Upsert(obj any)
	Delete(obj any)
}

// Options tune a Watch. The zero value is the default.
type Options struct {
	// ProbeInterval is how often a synced source checks the API server (jittered by
	// ±20%); 4 s by default. ProbeTimeout bounds one check; 2.5 s by default. So a
	// lost API server shows within 7.3 s.
	ProbeInterval, ProbeTimeout time.Duration
	// StaleProbeInterval is how often a stale source checks whether the API server is
	// back (jittered by ±50%); 1 s by default.
	StaleProbeInterval time.Duration
}

func (o *Options) defaults() {
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 4 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 2500 * time.Millisecond
	}
	if o.StaleProbeInterval <= 0 {
		o.StaleProbeInterval = time.Second
	}
}

// Watch lists and watches a Target for a peer source, reporting failures through
// its Publisher.
type Watch struct {
	target  Target
	handler Handler
	pub     *discovery.Publisher
	opts    Options

	mu  sync.Mutex // serializes the handler's calls; guards gen
	gen uint64     // the reflector whose events count (see sink)
}

// New returns a Watch of t that hands the objects to h and reports to pub.
func New(t Target, h Handler, pub *discovery.Publisher, opts Options) *Watch {
	opts.defaults()
	return &Watch{target: t, handler: h, pub: pub, opts: opts}
}

// Run runs reflectors on cfg and watches over them (see the package's doc) until
// ctx ends; an error means it cannot go on (a configuration it cannot use).
func (w *Watch) Run(ctx context.Context, cfg *rest.Config) error {
	for {
		client, err := newClientset(cfg)
		if err != nil {
			return err
		}
		rctx, stop := context.WithCancel(ctx)
		listed := w.startReflector(rctx, client)
		select {
		case <-ctx.Done():
			stop()
			client.close()
			return nil
		case <-listed:
		}
		w.pub.ClearStale() // a no-op unless this reflector follows an outage (its list published it already)
		err = w.checkUntilFailure(ctx, client)
		stop()
		client.close()
		if ctx.Err() != nil {
			return nil
		}
		w.failCheck(err)
		if !w.waitReachable(ctx, cfg) {
			return nil
		}
	}
}

// startReflector runs a reflector on client until ctx ends; the returned channel is
// closed by its first list.
func (w *Watch) startReflector(ctx context.Context, client kubernetes.Interface) <-chan struct{} {
	w.mu.Lock()
	w.gen++
	sk := &sink{w: w, gen: w.gen, listed: make(chan struct{})}
	w.mu.Unlock()
	sel := w.target.Selector
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return w.target.List(ctx, client, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return w.target.Watch(ctx, client, o)
		},
	}
	// Retries of a failing list back off from 0.5 s to 5 s (with jitter: at most
	// 10 s), not client-go's 30 s: a replica that could not list at start (no Role
	// yet) follows the fix quickly.
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 10, Cap: 5 * time.Second}
	r := toolscache.NewReflectorWithOptions(lw, w.target.Object, sk, toolscache.ReflectorOptions{
		Name: "epp-peer-discovery", Backoff: &backoff,
	})
	go func() {
		_ = backoff.DelayWithReset(clock.RealClock{}, 2*time.Minute).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
			if err := r.ListAndWatchWithContext(ctx); err != nil && ctx.Err() == nil {
				w.reportError(err)
			}
			return false, nil
		})
	}()
	return sk.listed
}

// sink is a reflector's store: it hands the objects to the handler, and drops what
// a stopped reflector still sends.
type sink struct {
	w      *Watch
	gen    uint64
	listed chan struct{}
	once   bool
}

func (k *sink) lock() bool {
	k.w.mu.Lock()
	if k.w.gen != k.gen {
		k.w.mu.Unlock()
		return false
	}
	return true
}

func (k *sink) Add(obj any) error { return k.Update(obj) }
func (k *sink) Resync() error     { return nil }
func (k *sink) Update(obj any) error {
	if !k.lock() {
		return nil
	}
	defer k.w.mu.Unlock()
	k.w.handler.Upsert(obj)
	return nil
}

func (k *sink) Delete(obj any) error {
	if !k.lock() {
		return nil
	}
	defer k.w.mu.Unlock()
	k.w.handler.Delete(obj)
	return nil
}

func (k *sink) Replace(list []any, _ string) error {
	if !k.lock() {
		return nil
	}
	defer k.w.mu.Unlock()
	k.w.handler.Replace(list)
	if !k.once {
		k.once = true
		close(k.listed)
	}
	return nil
}

// checkUntilFailure checks the API server through client every ProbeInterval
// (±20%) until a check fails (its error) or ctx ends (ctx.Err()).
func (w *Watch) checkUntilFailure(ctx context.Context, client kubernetes.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(jitter(w.opts.ProbeInterval, 0.2)):
		}
		if err := w.check(ctx, client); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// failCheck reports a failed check with its cause (Classify); a forbidden one names
// the missing permission.
func (w *Watch) failCheck(err error) {
	reason := Classify(err)
	if reason == metrics.ReasonForbidden {
		err = w.forbidden(err)
	}
	w.pub.Fail(reason, err)
}

// waitReachable checks, over a new connection each time, until the API server
// answers (true) or ctx ends (false): first after StaleProbeInterval, then 1.5 times
// longer each time up to twice it, always jittered by ±50%, so that replicas that
// lost the API server together never retry together. Every failed check is
// reported (Publisher.Fail), so the reason and error shown are the latest.
func (w *Watch) waitReachable(ctx context.Context, cfg *rest.Config) bool {
	interval := w.opts.StaleProbeInterval
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(jitter(interval, 0.5)):
		}
		interval = min(interval*3/2, 2*w.opts.StaleProbeInterval)
		client, err := newClientset(cfg)
		if err == nil {
			err = w.check(ctx, client)
			client.close()
		}
		if err == nil {
			return true
		}
		if ctx.Err() == nil {
			w.failCheck(err)
		}
	}
}

// check lists at most one of the objects: the API server is reachable, healthy,
// and still lets this replica read them.
func (w *Watch) check(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, w.opts.ProbeTimeout)
	defer cancel()
	_, err := w.target.List(ctx, client, metav1.ListOptions{LabelSelector: w.target.Selector, Limit: 1})
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{err}
	}
	return err
}

// reportError records a failed list or watch. A forbidden error names the missing
// permission; ends of a watch the reflector handles itself are not errors.
func (w *Watch) reportError(err error) {
	switch {
	case err == nil || errors.Is(err, context.Canceled):
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err), isEOF(err):
	case apierrors.IsForbidden(err):
		w.pub.Fail(metrics.ReasonForbidden, w.forbidden(err))
	default:
		// Named by its cause where it has one (refused, tls, server-error, ...), as
		// the health check's failures are; else "watch".
		reason := Classify(err)
		if reason == "other" {
			reason = metrics.ReasonWatch
		}
		w.pub.Fail(reason, fmt.Errorf("list/watch of %s in namespace %q failed: %w", w.target.Resource, w.target.Namespace, err))
	}
}

func (w *Watch) forbidden(err error) error {
	return fmt.Errorf("missing RBAC: need get, list and watch on %s in namespace %q (a Role bound to this pod's ServiceAccount): %w", w.target.rbac(), w.target.Namespace, err)
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
