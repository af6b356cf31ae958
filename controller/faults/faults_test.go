package faults_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/metrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/faultproxy"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// Bounds the issue sets, with the defaults (4 s checks ±20%, 2.5 s timeout, 1-2 s
// checks while stale).
const (
	detectWithin  = 10 * time.Second
	recoverWithin = 5 * time.Second
)

// replica is an epp app (replica epp-0) whose API server is reached through proxy.
type replica struct {
	*app.App
	proxy *faultproxy.Proxy
	logs  *capture.Buffer
	ns    string
	cs    kubernetes.Interface // an admin client of its API server, not through the proxy
}

// startReplica creates namespace ns with slices listing epp-1 and epp-2 (epp-0 is the
// replica itself) and starts the replica through a proxy to the suite's API server,
// with the credentials of cfg (admin by default), and waits until it is ready.
func startReplica(t *testing.T, cfg *rest.Config) *replica {
	t.Helper()
	return startReplicaOn(t, testenvOf(), cfg)
}

// startReplicaOn is startReplica on the API server of e (e's admin by default).
func startReplicaOn(t *testing.T, e *testenv.Env, cfg *rest.Config) *replica {
	t.Helper()
	ctx := context.Background()
	ns, err := e.CreateNamespace(ctx, "fault", nil)
	if err != nil {
		t.Fatal(err)
	}
	createSlice(t, e.Clientset, ns, "epp-a", "epp-0", "10.0.0.1", "epp-1", "10.0.0.2")
	createSlice(t, e.Clientset, ns, "epp-b", "epp-2", "10.0.0.3")
	if cfg == nil {
		cfg = e.Config
	}
	proxy, through := faultproxy.Through(t, cfg)
	l := &capture.Buffer{}
	opts, err := app.Parse([]string{"--enable-peer-discovery", "--epp-peer-service=epp",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"},
		func(k string) string {
			return map[string]string{"NAMESPACE": ns, "POD_NAME": "epp-0", "POD_IP": "10.0.0.1"}[k]
		}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(opts, through, l.Logger())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("app.Run: %v", err)
		}
		if t.Failed() {
			t.Logf("replica logs:\n%s", l.String())
		}
	})
	r := &replica{App: a, proxy: proxy, logs: l, ns: ns, cs: e.Clientset}
	r.waitPeers(t, "start", 30*time.Second, "epp-1", "epp-2")
	return r
}

func createSlice(t *testing.T, cs kubernetes.Interface, ns, name string, podIPs ...string) {
	t.Helper()
	var opts []slicegen.SliceOption
	opts = append(opts, slicegen.Namespace(ns))
	for i := 0; i+1 < len(podIPs); i += 2 {
		opts = append(opts, slicegen.Pod(podIPs[i], podIPs[i+1]))
	}
	s := slicegen.Slice(name, opts...)
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), &s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func names(doc peers.Document) []string {
	out := []string{}
	for _, p := range doc.Peers {
		out = append(out, p.Name)
	}
	return out
}

// doc is the replica's /debug/peers document, read as a client does.
func (r *replica) doc(t *testing.T) peers.Document {
	t.Helper()
	return peerdoc.Must(t, r.MetricsAddr())
}

// waitPeers waits until the replica lists exactly want.
func (r *replica) waitPeers(t *testing.T, step string, within time.Duration, want ...string) time.Duration {
	t.Helper()
	return wait.For(t, within, func() string {
		if got := names(r.doc(t)); !slices.Equal(got, want) {
			return fmt.Sprintf("%s: the replica lists %v, want %v", step, got, want)
		}
		return ""
	})
}

// sampler reads the replica's /debug/peers every 20 ms and remembers the smallest
// set seen and when staleness came and went.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	ending  sync.Once
	mu      sync.Mutex
	lost    []string // peers of the kept set missing from some sample
	staleAt time.Time
	freshAt time.Time
	reasons []string
}

func (r *replica) sample(kept []string) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for i := 0; i < 15000; i++ { // at most 5 minutes
			doc, _, err := peerdoc.Get(r.MetricsAddr())
			if err != nil {
				continue // a sample lost to the client; the next one comes in 20 ms
			}
			got := names(doc)
			s.mu.Lock()
			for _, k := range kept {
				if !slices.Contains(got, k) && !slices.Contains(s.lost, k) {
					s.lost = append(s.lost, k)
				}
			}
			if doc.Stale != nil && *doc.Stale {
				if s.staleAt.IsZero() {
					s.staleAt = time.Now()
				}
				if !slices.Contains(s.reasons, doc.StaleReason) {
					s.reasons = append(s.reasons, doc.StaleReason)
				}
			} else if !s.staleAt.IsZero() && s.freshAt.IsZero() {
				s.freshAt = time.Now()
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return s
}

// end stops the sampler (once; later calls wait for it too).
func (s *sampler) end() {
	s.ending.Do(func() { close(s.stop) })
	<-s.done
}

func (s *sampler) stale() (time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.staleAt, slices.Clone(s.reasons)
}

// fault is one fault scenario.
type fault struct {
	name    string
	reason  string // the staleReason /debug/peers must show
	inject  func(t *testing.T, r *replica)
	restore func(t *testing.T, r *replica)
	// recoverWithin bounds the time from restore until the replica is fresh and
	// follows a change made then.
	recoverWithin time.Duration
}

func runFault(t *testing.T, r *replica, f fault) {
	t.Helper()
	s := r.sample([]string{"epp-1", "epp-2"})
	t.Cleanup(s.end)
	start := time.Now()
	f.inject(t, r)
	wait.Until(t, detectWithin+5*time.Second, f.name+": /debug/peers stale after the fault", func() bool {
		at, _ := s.stale()
		return !at.IsZero()
	})
	at, reasons := s.stale()
	detected := at.Sub(start)
	if detected > detectWithin {
		t.Errorf("%s: stale after %s, want within %s", f.name, detected.Round(time.Millisecond), detectWithin)
	}
	if !slices.Contains(reasons, f.reason) {
		t.Errorf("%s: stale reasons %v, want %q", f.name, reasons, f.reason)
	}
	if got := testutil.ToFloat64(metrics.For(peers.SourceEndpointSlice).Stale); got != 1 {
		t.Errorf("%s: epp_peer_discovery_stale = %v while stale", f.name, got)
	}
	if err := r.Ready(); err != nil {
		t.Errorf("%s: a synced replica must stay ready while stale, /readyz says %v", f.name, err)
	}
	time.Sleep(2 * time.Second) // the fault lasts

	f.restore(t, r)
	restored := time.Now()
	createSlice(t, r.cs, r.ns, "epp-c", "epp-3", "10.0.0.4")
	within := f.recoverWithin
	if within == 0 {
		within = recoverWithin
	}
	followed := r.waitPeers(t, f.name+": after the fault", within+10*time.Second, "epp-1", "epp-2", "epp-3")
	s.end()
	wait.Until(t, within+10*time.Second, f.name+": fresh after the fault ended", func() bool {
		d := r.doc(t)
		return d.Stale == nil || !*d.Stale
	})
	fresh := time.Since(restored)
	if followed > within || fresh > within {
		t.Errorf("%s: a change made when the fault ended reached /debug/peers after %s (fresh after %s), want within %s",
			f.name, followed.Round(time.Millisecond), fresh.Round(time.Millisecond), within)
	}
	if s.lost != nil {
		t.Errorf("%s: peers %v vanished from /debug/peers during the fault: the last good set must stay", f.name, s.lost)
	}
	if got := testutil.ToFloat64(metrics.For(peers.SourceEndpointSlice).Stale); got != 0 {
		t.Errorf("%s: epp_peer_discovery_stale = %v after recovery", f.name, got)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "peer view is stale") || !strings.Contains(logs, f.reason) || !strings.Contains(logs, "peer view is fresh again") {
		t.Errorf("%s: the log does not say stale (%s) and fresh again:\n%s", f.name, f.reason, logs)
	}
	t.Logf("%s: stale after %s (reasons %v), fresh %s after the fault ended, a change then visible after %s",
		f.name, detected.Round(time.Millisecond), reasons, fresh.Round(time.Millisecond), followed.Round(time.Millisecond))
	record(f.name, detected, fresh, followed)
}

// figures collects the measured times for the summary.
var figures struct {
	sync.Mutex
	lines []string
}

func record(name string, detected, fresh, followed time.Duration) {
	figures.Lock()
	defer figures.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf("%-28s stale after %5.2fs   fresh %5.2fs after   change visible %5.2fs after",
		name, detected.Seconds(), fresh.Seconds(), followed.Seconds()))
}

func TestRefused(t *testing.T) {
	r := startReplica(t, nil)
	runFault(t, r, fault{
		name: "refused", reason: "refused",
		inject:  func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Refuse, "") },
		restore: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Pass, "") },
	})
}

func TestReset(t *testing.T) {
	r := startReplica(t, nil)
	runFault(t, r, fault{
		name: "reset", reason: "reset",
		inject:  func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Reset, "") },
		restore: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Pass, "") },
	})
}

// TestBlackHole: the open connection goes dead (every byte dropped, no reset) while
// new connections work: stale within 10 s, and the watch back (on a new connection)
// within 60 s — in fact within seconds, since the stale checks open new connections.
func TestBlackHole(t *testing.T) {
	r := startReplica(t, nil)
	runFault(t, r, fault{
		name: "black-holed connection", reason: "timeout",
		inject: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.BlackHoleOpen, "") },
		// Nothing to restore: new connections work all along. The bound is the
		// issue's for a black hole.
		restore:       func(*testing.T, *replica) {},
		recoverWithin: 60 * time.Second,
	})
}

// TestBlackHoleEverything: no connection gets through until the fault ends.
func TestBlackHoleEverything(t *testing.T) {
	r := startReplica(t, nil)
	runFault(t, r, fault{
		name: "black hole", reason: "timeout",
		inject:  func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.BlackHole, "") },
		restore: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Pass, "") },
	})
}

func TestTLSError(t *testing.T) {
	r := startReplica(t, nil)
	bogus := serveTLS(t, selfSigned(t), http.StatusOK)
	runFault(t, r, fault{
		name: "tls", reason: "tls",
		inject:  func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Divert, bogus) },
		restore: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Pass, "") },
	})
}

func TestServerErrors(t *testing.T) {
	r := startReplica(t, nil)
	cert, key := servingCert()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	failing := serveTLS(t, pair, http.StatusServiceUnavailable)
	runFault(t, r, fault{
		name: "5xx", reason: "server-error",
		inject:  func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Divert, failing) },
		restore: func(t *testing.T, r *replica) { mustSet(t, r.proxy, faultproxy.Pass, "") },
	})
}

// TestRoleRemoved: the replica's ServiceAccount loses its RoleBinding, then gets it
// back.
func TestRoleRemoved(t *testing.T) {
	ctx := context.Background()
	e := testenvOf()
	saNS, err := e.CreateNamespace(ctx, "fault-sa", nil)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := e.ServiceAccountConfig(ctx, saNS, "epp")
	if err != nil {
		t.Fatal(err)
	}
	// The replica's namespace is made by startReplica, so the test grants the read
	// through a ClusterRoleBinding (a test fixture; the channels render a Role).
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fault-epp-" + saNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fault-epp-slices"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "epp", Namespace: saNS}},
	}
	if _, err := adminCS.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "fault-epp-slices"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminCS.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, sa)
	runFault(t, r, fault{
		name: "role removed", reason: "forbidden",
		inject: func(t *testing.T, r *replica) {
			if err := adminCS.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		restore: func(t *testing.T, r *replica) {
			c := crb.DeepCopy()
			c.ResourceVersion = ""
			if _, err := adminCS.RbacV1().ClusterRoleBindings().Create(ctx, c, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestAPIServerRestart cuts the replica off, deletes a slice, restarts the API server
// (same address, same certificates: every resourceVersion the replica knew is now
// older than the server's watch cache), then lets the replica through: the deleted
// slice's peer leaves within 5 s, through a re-list.
func TestAPIServerRestart(t *testing.T) {
	r := startReplica(t, nil)
	ctx := context.Background()
	runFault(t, r, fault{
		name: "API server restart", reason: "refused",
		inject: func(t *testing.T, r *replica) {
			mustSet(t, r.proxy, faultproxy.Refuse, "")
		},
		restore: func(t *testing.T, r *replica) {
			// While the replica is cut off: a peer leaves, and the server restarts.
			if err := adminCS.DiscoveryV1().EndpointSlices(r.ns).Delete(ctx, "epp-b", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			createSlice(t, r.cs, r.ns, "epp-b2", "epp-2", "10.0.0.3") // epp-2 moves to a new slice
			apiserver := env.ControlPlane.GetAPIServer()
			if err := apiserver.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := apiserver.Start(); err != nil {
				t.Fatalf("restarting the API server: %v", err)
			}
			waitAPIServer(t)
			mustSet(t, r.proxy, faultproxy.Pass, "")
		},
	})
	// epp-b is gone (its peer epp-2 is listed through epp-b2): the replica holds
	// epp-a, epp-b2 and epp-c.
	if got := testutil.ToFloat64(metrics.For(peers.SourceEndpointSlice).EndpointSlices); got != 3 {
		t.Fatalf("the replica holds %v slices after the restart, want 3: epp-b (deleted while cut off) must be gone", got)
	}
}

func waitAPIServer(t *testing.T) {
	t.Helper()
	wait.ForEvery(t, 60*time.Second, 100*time.Millisecond, func() string {
		if _, err := adminCS.Discovery().ServerVersion(); err != nil {
			return "the API server does not answer since its restart: " + err.Error()
		}
		return ""
	})
}

func mustSet(t *testing.T, p *faultproxy.Proxy, m faultproxy.Mode, divert string) {
	t.Helper()
	if err := p.Set(m, divert); err != nil {
		t.Fatal(err)
	}
}

// serveTLS serves HTTPS on 127.0.0.1 with cert, answering every request with code.
func serveTLS(t *testing.T, cert tls.Certificate, code int) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","code":%d}`, code)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not-the-api-server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
