//go:build e2ekind

// Package e2ekind runs llm-d-router's EPP with state sync on the project's kind
// cluster (make e2e-kind, after the terratest suite): the chart with
// router.epp.stateSync.enabled, three replicas on three nodes, requests held open
// through one replica over ext_proc (a port-forward), and the faults that need a real
// network: TCP to one replica's peer-sync port dropped with iptables in its node, and
// its pod deleted. The load's way there and back (requests held, then ended) is timed.
package e2ekind_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/kindnode"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/inflight"
)

const interval = 200 * time.Millisecond

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run this through make e2e-kind (hack/kind/e2e.sh)", name)
	}
	return v
}

type cluster struct {
	cfg *rest.Config
	cs  *kubernetes.Clientset
	ns  string
}

// debugPort is the EPP's debug port (the discovery plugin's debugAddress, where
// /debug/peers and /debug/peer-sync are served), as the chart sets it.
const debugPort = 9091

// forward opens a port-forward to the debug port of pod and returns
// 127.0.0.1:<local port>.
func (c *cluster) forward(t *testing.T, pod string) string {
	t.Helper()
	addr, stop, err := c.openForward(pod, debugPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// tryForward is forward for a pod that may not serve yet or be gone: "" when the
// port-forward cannot be opened. It stays open until the process ends.
func (c *cluster) tryForward(pod string, port int) string {
	addr, _, err := c.openForward(pod, port)
	if err != nil {
		return ""
	}
	return addr
}

func (c *cluster) openForward(pod string, port int) (string, func(), error) {
	tr, upgrader, err := spdy.RoundTripperFor(c.cfg)
	if err != nil {
		return "", nil, err
	}
	u, err := url.Parse(c.cfg.Host)
	if err != nil {
		return "", nil, err
	}
	u.Path = fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", c.ns, pod)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u),
		[]string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	var once sync.Once
	closeIt := func() { once.Do(func() { close(stop) }) }
	select {
	case <-ready:
	case err := <-failed:
		closeIt()
		return "", nil, fmt.Errorf("port-forward to %s:%d: %w", pod, port, err)
	case <-time.After(30 * time.Second):
		closeIt()
		return "", nil, fmt.Errorf("port-forward to %s:%d not ready within 30 s", pod, port)
	}
	ports, err := pf.GetPorts()
	if err != nil {
		closeIt()
		return "", nil, fmt.Errorf("port-forward to %s:%d: %w", pod, port, err)
	}
	if len(ports) != 1 {
		closeIt()
		return "", nil, fmt.Errorf("port-forward to %s:%d: %d local ports, want 1", pod, port, len(ports))
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), closeIt, nil
}

var client = &http.Client{Timeout: 5 * time.Second}

// loads is the in-flight requests per endpoint that a replica's scoring reads
// (/debug/peer-sync on its http-peers port: every replica's value summed).
func loads(addr string) (map[string]int64, error) {
	resp, err := client.Get("http://" + addr + "/debug/peer-sync?key=inflight:")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc peersync.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	return inflight.Requests(doc)
}

// waitLoads waits until every observer (name -> its /debug/peer-sync address) sees
// want (inflight.WaitLoads), logs and returns how long that took.
func waitLoads(t *testing.T, step string, within time.Duration, observers map[string]string, want map[string]int64) time.Duration {
	t.Helper()
	read := map[string]func() (map[string]int64, error){}
	for name, addr := range observers {
		read[name] = func() (map[string]int64, error) { return loads(addr) }
	}
	took := inflight.WaitLoads(t, step, within, read, want)
	t.Logf("%s: after %v", step, took.Round(time.Millisecond))
	return took
}

// newCluster connects to the kind cluster and creates a namespace for the test
// (named prefix-<random>, restricted pod security), deleted with it.
func newCluster(t *testing.T, prefix string) *cluster {
	t.Helper()
	kubeconfig, kctx := env(t, "E2E_KUBECONFIG"), env(t, "E2E_KUBE_CONTEXT")
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg), ns: prefix + "-" + rand.String(5)}
	ctx := context.Background()
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) < 3 {
		t.Fatalf("the kind cluster has %d node(s): state sync across nodes needs 3 (make e2e-kind's default KIND_NODES=3)", len(nodes.Items))
	}
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns,
		Labels: testenv.RestrictedPodSecurity()}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cs.CoreV1().Namespaces().Delete(context.Background(), c.ns, metav1.DeleteOptions{}) })
	return c
}

// installEPP installs the chart as release epp with three replicas of llm-d-router's
// EPP, one on each node, peer discovery and state sync on, and extra values (YAML
// that follows router.epp.stateSync's keys: indented by 6, more of stateSync; by 4,
// more of router.epp), and waits for it.
func installEPP(t *testing.T, c *cluster, extra string) {
	t.Helper()
	kubeconfig, kctx, helm, chart := env(t, "E2E_KUBECONFIG"), env(t, "E2E_KUBE_CONTEXT"), env(t, "HELM"), env(t, "CHART")
	repo, tag, _ := strings.Cut(env(t, "LLMD_IMAGE"), ":")
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`router:
  epp:
    replicas: 3
    image: {repository: %s, tag: %q}
    topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
    peerDiscovery:
      enabled: true
    stateSync:
      enabled: true
      interval: %s
%s`, repo, tag, interval, extra)), 0o644); err != nil {
		t.Fatal(err)
	}
	helmCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"--kubeconfig", kubeconfig, "--kube-context", kctx, "-n", c.ns}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
	}
	helmCmd("install", "epp", chart, "-f", values, "--wait", "--timeout", "3m")
	t.Cleanup(func() {
		cmd := exec.Command(helm, "--kubeconfig", kubeconfig, "--kube-context", kctx, "-n", c.ns, "uninstall", "epp", "--wait")
		_, _ = cmd.CombinedOutput()
	})
}

func TestStateSyncOnKind(t *testing.T) {
	c := newCluster(t, "e2e-state-sync")
	ctx := context.Background()
	// Two model-server stand-ins (the epp image: a process that is ready and serves
	// nothing on 8000; the EPP scores them by in-flight requests).
	ids := modelServers(t, c, env(t, "IMAGE"))
	installEPP(t, c, "")

	pods := eppPods(t, c)
	var onNodes []string
	for _, p := range pods {
		onNodes = append(onNodes, p.Spec.NodeName)
	}
	if slices.Sort(onNodes); len(slices.Compact(slices.Clone(onNodes))) != 3 {
		t.Fatalf("the replicas are on nodes %v: want one on each of the 3", onNodes)
	}
	a, b, cc := pods[0], pods[1], pods[2]
	peersOf := map[string]string{b.Name: c.forward(t, b.Name), cc.Name: c.forward(t, cc.Name)}
	all := map[string]string{a.Name: c.forward(t, a.Name)}
	for k, v := range peersOf {
		all[k] = v
	}
	idle := map[string]int64{ids[0]: 0, ids[1]: 0}
	waitLoads(t, "every replica in sync, both endpoints published", 60*time.Second, all, idle)

	// Three requests held open through A: B and C see A's in-flight load.
	grpcA := c.forwardExtProc(t, a.Name)
	held := map[string]int64{ids[0]: 0, ids[1]: 0}
	var reqs []*extproc.Request
	for range 3 {
		r := send(t, a.Name, grpcA)
		reqs = append(reqs, r)
		held[podByIP(t, c, r.Endpoint)]++
	}
	t.Cleanup(func() {
		for _, r := range reqs {
			r.Abort()
		}
	})
	bound := 4*interval + time.Second
	seen := waitLoads(t, "B and C see the requests held through A", 10*time.Second, peersOf, held)
	if seen > bound {
		t.Errorf("B and C saw A's in-flight load after %v, want within %v (two intervals, then slack for polling over port-forwards)", seen, bound)
	}
	// The requests end as Envoy ends them: B and C are back to 0.
	for _, r := range reqs {
		r.End()
	}
	cleared := waitLoads(t, "the requests through A ended: B and C back to 0", 10*time.Second, peersOf, idle)
	if cleared > bound {
		t.Errorf("B and C still counted A's ended requests after %v, want within %v", cleared, bound)
	}
	// Three more held open through A for the faults.
	reqs, held = nil, map[string]int64{ids[0]: 0, ids[1]: 0}
	for range 3 {
		r := send(t, a.Name, grpcA)
		reqs = append(reqs, r)
		held[podByIP(t, c, r.Endpoint)]++
	}
	waitLoads(t, "B and C see the new requests held through A", 10*time.Second, peersOf, held)

	// A's pushes to the others' peer-sync port dropped in A's node (what the node
	// forwards from A's pod): B and C stop counting A within the TTL (3 intervals),
	// then exactly A's load again once the rule is gone.
	restore := kindnode.InsertRule(t, a.Spec.NodeName, "FORWARD", "-s", a.Status.PodIP+"/32", "-p", "tcp", "--dport", "9005", "-j", "DROP")
	gone := waitLoads(t, "A's pushes dropped: B and C stop counting A", 10*time.Second, peersOf, idle)
	if gone > 3*interval+time.Second {
		t.Errorf("A's load counted %v after its pushes were dropped, want within the TTL (%v) and a poll", gone, 3*interval)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	waitLoads(t, "A's pushes flow again: exact sums", 15*time.Second, peersOf, held)

	// A's pod deleted: its load leaves B and C within 1 s of its leaving the
	// EndpointSlice.
	if err := c.cs.CoreV1().Pods(c.ns).Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := waitSliceGone(t, c, a.Name)
	waitLoads(t, "A deleted: B and C stop counting it", 10*time.Second, peersOf, idle)
	d := time.Since(left)
	t.Logf("B and C stopped counting A %v after A left the EndpointSlice (polled every 20 ms)", d.Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("A's load counted %v after A left the EndpointSlice, want within 1 s", d)
	}
}

// send sends a request through a forwarded ext_proc port (forwardExtProc).
func send(t *testing.T, pod, addr string) *extproc.Request {
	t.Helper()
	r, err := extproc.SendTLS(addr)
	if err != nil {
		t.Fatalf("a request through %s: %v", pod, err)
	}
	return r
}

// extProcWithin bounds forwardExtProc. A ready pod of upstream's EPP may not listen
// on its ext_proc port yet: its readiness is the gRPC health server's, which starts
// before the manager's caches sync, and the ext_proc server then makes its
// self-signed certificate (an RSA 4096 key: seconds on a loaded node).
const extProcWithin = 3 * time.Minute

// forwardExtProc forwards pod's ext_proc port (9002) once it completes a TLS
// handshake, and returns 127.0.0.1:<local port>; it logs how long that took when it
// was not at once. A port-forward ends at the first connection the pod refuses
// (client-go's forwarder closes on a stream's error, and its local port then refuses
// every dial), so each try opens a forward of its own. When the port does not answer
// within extProcWithin, the test fails with the pod's restarts and last log lines.
func (c *cluster) forwardExtProc(t *testing.T, pod string) string {
	t.Helper()
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	var addr string
	var stop func()
	took := wait.ForEvery(&podLogsOnFailure{T: t, c: c, pod: pod}, extProcWithin, 250*time.Millisecond, func() string {
		a, s, err := c.openForward(pod, 9002)
		if err != nil {
			return err.Error()
		}
		conn, err := tls.DialWithDialer(dialer, "tcp", a, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // the EPP's self-signed certificate, on 127.0.0.1
		if err != nil {
			s()
			return fmt.Sprintf("%s's ext_proc port does not complete a TLS handshake: %v", pod, err)
		}
		_ = conn.Close()
		addr, stop = a, s
		return ""
	})
	t.Cleanup(stop)
	if took > time.Second {
		t.Logf("%s's ext_proc port answered %v after its pod was ready", pod, took.Round(time.Millisecond))
	}
	return addr
}

// podLogsOnFailure is t, and when a wait fails, it adds pod's restarts and the last
// lines of its log to the failure: what a CI log needs to tell a slow start from a
// crash.
type podLogsOnFailure struct {
	*testing.T
	c   *cluster
	pod string
}

func (p *podLogsOnFailure) Fatalf(format string, args ...any) {
	p.Helper()
	msg := fmt.Sprintf(format, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if pod, err := p.c.cs.CoreV1().Pods(p.c.ns).Get(ctx, p.pod, metav1.GetOptions{}); err == nil {
		for _, s := range pod.Status.ContainerStatuses {
			msg += fmt.Sprintf("\ncontainer %s: ready %v, %d restarts", s.Name, s.Ready, s.RestartCount)
		}
	}
	tail := int64(40)
	if logs, err := p.c.cs.CoreV1().Pods(p.c.ns).GetLogs(p.pod, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx); err == nil {
		msg += "\nthe last lines of its log:\n" + string(logs)
	} else {
		msg += "\nits log: " + err.Error()
	}
	p.Fatal(msg)
}

// modelServers starts the two stand-ins and returns the EPP's endpoint IDs of them.
func modelServers(t *testing.T, c *cluster, image string) []string {
	t.Helper()
	ctx := context.Background()
	two := int32(2)
	no, yes := false, true
	uid := int64(65532)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model-server", Namespace: c.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "model-server"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/component": "model-server"}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: &no,
					SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{Name: "stand-in", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
				},
			},
		},
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	wait.ForEvery(t, 2*time.Minute, time.Second, func() string {
		pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=model-server"})
		if err != nil {
			return fmt.Sprintf("the model-server stand-ins are not ready: %v", err)
		}
		ids = nil
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && ready(&p) {
				ids = append(ids, c.ns+"/"+p.Name+"-rank-0")
			}
		}
		if len(ids) != 2 {
			return fmt.Sprintf("%d of the 2 model-server stand-ins ready", len(ids))
		}
		return ""
	})
	sort.Strings(ids)
	return ids
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eppPods are the EPP's three pods, ready, ordered by name.
func eppPods(t *testing.T, c *cluster) []corev1.Pod {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=epp"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && ready(&p) {
			out = append(out, p)
		}
	}
	if len(out) != 3 {
		t.Fatalf("%d ready EPP pods, want 3", len(out))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podByIP maps the EPP's pick (ip:port) to the model server's endpoint ID.
func podByIP(t *testing.T, c *cluster, endpoint string) string {
	t.Helper()
	host, _, _ := net.SplitHostPort(endpoint)
	pods, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=model-server"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == host {
			return c.ns + "/" + p.Name + "-rank-0"
		}
	}
	t.Fatalf("the EPP picked %s, which is no model server", endpoint)
	return ""
}

// waitSliceGone waits until pod is no ready endpoint of the EPP Service's slices
// and returns when that was seen.
func waitSliceGone(t *testing.T, c *cluster, pod string) time.Time {
	t.Helper()
	wait.For(t, 30*time.Second, func() string {
		slices, err := c.cs.DiscoveryV1().EndpointSlices(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=epp"})
		if err != nil {
			return fmt.Sprintf("listing the slices: %v", err)
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef != nil && e.TargetRef.Name == pod && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
					return pod + " still a ready endpoint of the slices"
				}
			}
		}
		return ""
	})
	return time.Now()
}
