// Package peerview compares what each EPP replica says its peers are (its own
// /debug/peers) with what the cluster says they should be: every other ready pod of
// the Deployment, by name and pod IP.
package peerview

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
)

// Ready reports whether a pod is a live replica: Running, Ready, with an IP, not
// being deleted.
func Ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Alive reports whether a pod is a live replica under membership alive: Running,
// with an IP, not being deleted, ready or not (a standby of an EPP run with leader
// election is not ready).
func Alive(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

// State is the Deployment's pods at one moment.
type State struct {
	Desired int32
	// Live are the ready pods (Alive ones with ReadMembers(..., Alive)), ordered by
	// name.
	Live []corev1.Pod
	// Others counts pods that exist but are not live and not being deleted
	// (starting); Terminating those being deleted.
	Others, Terminating int
}

// Read lists the Deployment and its pods.
func Read(ctx context.Context, cs kubernetes.Interface, namespace, deployment, selector string) (State, error) {
	return ReadMembers(ctx, cs, namespace, deployment, selector, Ready)
}

// ReadMembers is Read where member says which pods are live (Ready, or Alive).
func ReadMembers(ctx context.Context, cs kubernetes.Interface, namespace, deployment, selector string, member func(*corev1.Pod) bool) (State, error) {
	var s State
	dep, err := cs.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return s, err
	}
	s.Desired = ptrOr(dep.Spec.Replicas, 1)
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return s, err
	}
	for i := range pods.Items {
		switch {
		case member(&pods.Items[i]):
			s.Live = append(s.Live, pods.Items[i])
		case pods.Items[i].DeletionTimestamp != nil:
			s.Terminating++
		default:
			s.Others++
		}
	}
	sort.Slice(s.Live, func(i, j int) bool { return s.Live[i].Name < s.Live[j].Name })
	return s, nil
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// Settled reports whether the Deployment has exactly its desired number of live pods
// and none starting. Pods being deleted may still be draining (llm-d-router's EPP
// keeps serving for 30 s after SIGTERM); they are not replicas any more, and no
// replica may list them.
func (s State) Settled() bool { return int(s.Desired) == len(s.Live) && s.Others == 0 }

// Expected is, for each live pod, the peers it must list: "namespace/name@ip:port" of
// every other live pod.
func (s State) Expected(port int32) map[string][]string {
	out := map[string][]string{}
	for _, self := range s.Live {
		want := []string{}
		for _, p := range s.Live {
			if p.Name != self.Name {
				want = append(want, Format(p.Namespace, p.Name, p.Status.PodIP, port))
			}
		}
		sort.Strings(want)
		out[self.Name] = want
	}
	return out
}

// Format renders one peer the way Expected does.
func Format(namespace, name, ip string, port int32) string {
	return fmt.Sprintf("%s/%s@%s", namespace, name, net.JoinHostPort(ip, fmt.Sprint(port)))
}

// Listed renders a document's peers the way Expected does.
func Listed(doc peers.Document) []string {
	out := []string{}
	for _, p := range doc.Peers {
		out = append(out, Format(p.Namespace, p.Name, p.Address, p.Port))
	}
	return out
}

var client = &http.Client{Timeout: 2 * time.Second}

// Fetch reads /debug/peers from addr, which must be a loopback address: views are
// read through 127.0.0.1 (a local process or a port-forward), never from pod IPs
// (peerdoc, the tests' one reader of the document).
func Fetch(ctx context.Context, addr string) (peers.Document, error) {
	doc, _, err := peerdoc.GetContext(ctx, addr)
	return doc, err
}

// View is one replica's answer.
type View struct {
	Doc peers.Document
	Err error
}

// Diff returns "" when every live pod has a view listing exactly its expected peers,
// synced, and a description of the first differences otherwise.
func Diff(expected map[string][]string, views map[string]View) string {
	var problems []string
	names := make([]string, 0, len(expected))
	for n := range expected {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, ok := views[n]
		switch {
		case !ok:
			problems = append(problems, n+": no replica view yet")
		case v.Err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", n, v.Err))
		case v.Doc.Synced == nil || !*v.Doc.Synced:
			problems = append(problems, n+": not synced")
		case !slices.Equal(Listed(v.Doc), expected[n]):
			problems = append(problems, fmt.Sprintf("%s lists %v, want %v", n, Listed(v.Doc), expected[n]))
		}
	}
	return strings.Join(problems, "; ")
}

// Table renders replica -> peers for people.
func Table(s State, views map[string]View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-24s %-13s %s\n", "REPLICA", "POD IP", "ITS PEERS (from its own /debug/peers)")
	for _, p := range s.Live {
		v, ok := views[p.Name]
		cell := "(starting)"
		switch {
		case ok && v.Err != nil:
			cell = "(" + v.Err.Error() + ")"
		case ok && !v.Doc.Enabled:
			cell = "(peer discovery off)"
		case ok && (v.Doc.Synced == nil || !*v.Doc.Synced):
			cell = "(syncing)"
		case ok:
			var names []string
			for _, q := range v.Doc.Peers {
				names = append(names, q.Name)
			}
			cell = strings.Join(names, ", ")
			if cell == "" {
				cell = "(none)"
			}
		}
		fmt.Fprintf(&b, "  %-24s %-13s %s\n", p.Name, p.Status.PodIP, cell)
	}
	return b.String()
}

// metricsToken is the bearer token FetchMetrics sends (ReadMetricsAs).
var metricsToken string

// metricsReader names the ServiceAccount, ClusterRole and ClusterRoleBinding of
// ReadMetricsAs.
const metricsReader = "e2e-metrics-reader"

// ReadMetricsAs makes FetchMetrics authenticate as a ServiceAccount that may GET
// /metrics and nothing else (default/e2e-metrics-reader, a ClusterRole and its
// binding, a token from the TokenRequest API): llm-d-router's EPP checks a token on
// /metrics (the chart's default, as upstream's). It returns a function that deletes
// what it made.
func ReadMetricsAs(ctx context.Context, cs kubernetes.Interface) (func(), error) {
	meta := metav1.ObjectMeta{Name: metricsReader}
	cleanup := func() {
		ctx := context.Background()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, metricsReader, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, metricsReader, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts("default").Delete(ctx, metricsReader, metav1.DeleteOptions{})
	}
	cleanup()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
		return cleanup, err
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta,
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		return cleanup, err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReader},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: metricsReader, Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		return cleanup, err
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, metricsReader, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(2 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return cleanup, err
	}
	metricsToken = tr.Status.Token
	return cleanup, nil
}

func ptrTo[T any](v T) *T { return &v }

// FetchMetrics reads /metrics from addr (a loopback address, as Fetch), with the
// token of ReadMetricsAs when it was called; anything but 200 is an error (a 401
// body is no metrics).
func FetchMetrics(ctx context.Context, addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); (ip == nil && host != "localhost") || (ip != nil && !ip.IsLoopback()) {
		return "", fmt.Errorf("refusing to read %s: metrics are read through 127.0.0.1 only", addr)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	if metricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+metricsToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return string(b), err
}

// Histogram is a Prometheus histogram's cumulative bucket counts, by upper bound.
type Histogram map[float64]float64

// AddHistogram adds the buckets of the histogram name found in a /metrics text, of
// every series (its other labels, e.g. discovery, summed over).
func (h Histogram) AddHistogram(text, name string) {
	prefix := name + "_bucket{"
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		labels, count, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		le := ""
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, `le="`); ok {
				le = strings.TrimSuffix(v, `"`)
			}
		}
		bound, err1 := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			bound, err1 = math.Inf(1), nil
		}
		n, err2 := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err1 == nil && err2 == nil {
			h[bound] += n
		}
	}
}

// Count is the number of observations.
func (h Histogram) Count() float64 { return h[math.Inf(1)] }

// Quantile estimates the q-quantile as Prometheus' histogram_quantile does: linear
// within the bucket that holds it.
func (h Histogram) Quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := h.Count()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		if c := h[b]; c >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if c == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b, h[b]
	}
	return prevBound
}
