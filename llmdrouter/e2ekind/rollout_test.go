//go:build e2ekind

package e2ekind_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// rejectionWatch follows every EPP pod of the namespace, each through a port-forward
// to its http-peers port, and keeps the most rejections each one's /debug/peer-sync
// ever showed, until stop.
type rejectionWatch struct {
	mu      sync.Mutex
	seen    map[string]map[string]float64 // pod -> reason -> most
	polls   map[string]int
	refused map[string][]string // pod -> its log lines that say it refused
}

func watchRejections(c *cluster, stop <-chan struct{}) *rejectionWatch {
	w := &rejectionWatch{seen: map[string]map[string]float64{}, polls: map[string]int{}, refused: map[string][]string{}}
	followed := map[string]bool{}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			pods, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=epp"})
			if err != nil {
				continue
			}
			for _, p := range pods.Items {
				if followed[p.Name] || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
					continue
				}
				followed[p.Name] = true
				go w.follow(c, p.Name, stop)
				go w.readLog(c, p.Name, stop)
			}
		}
	}()
	return w
}

func (w *rejectionWatch) follow(c *cluster, pod string, stop <-chan struct{}) {
	var addr string
	for addr == "" {
		select {
		case <-stop:
			return
		default:
		}
		addr = c.tryForward(pod, debugPort)
		if addr == "" {
			time.Sleep(250 * time.Millisecond)
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := client.Get("http://" + addr + "/debug/peer-sync?key=-")
		if err != nil {
			continue // not serving yet, or gone
		}
		var doc peersync.Document
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil {
			continue
		}
		w.mu.Lock()
		if w.seen[pod] == nil {
			w.seen[pod] = map[string]float64{}
		}
		for reason, n := range doc.Rejections {
			w.seen[pod][reason] = max(w.seen[pod][reason], n)
		}
		w.polls[pod]++
		w.mu.Unlock()
	}
}

// readLog keeps the lines of pod's log that say it refused a connection (which
// peer, which reason, when), until stop: what a failure shows, the replaced pods'
// logs being gone by then.
func (w *rejectionWatch) readLog(c *cluster, pod string, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	r, err := c.cs.CoreV1().Pods(c.ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		return
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "refused") {
			w.mu.Lock()
			w.refused[pod] = append(w.refused[pod], line)
			w.mu.Unlock()
		}
	}
}

// TestRolloutRestartCountsNoRejection: kubectl rollout restart of the EPP
// Deployment, state sync on, membership ready: every replica, the ones replaced as
// long as they answer and the new ones, counts no peer-sync rejection (each new
// replica dials its peers only once its own discovery lists it, as theirs does; a
// replica leaving stops dialing when it is no longer listed), and the new replicas
// are in sync with each other after it.
func TestRolloutRestartCountsNoRejection(t *testing.T) {
	c := newCluster(t, "e2e-rollout")
	ids := modelServers(t, c, env(t, "IMAGE"))
	installEPP(t, c, "")
	stop := make(chan struct{})
	defer close(stop)
	w := watchRejections(c, stop)
	old := eppPods(t, c)
	all := map[string]string{}
	for _, p := range old {
		all[p.Name] = c.forward(t, p.Name)
	}
	idle := map[string]int64{ids[0]: 0, ids[1]: 0}
	waitLoads(t, "every replica in sync before the rollout", 60*time.Second, all, idle)

	// kubectl rollout restart: a new pod template annotation.
	ctx := context.Background()
	deps, err := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=epp"})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("the EPP Deployment: %v (%d found)", err, len(deps.Items))
	}
	name := deps.Items[0].Name
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := c.cs.AppsV1().Deployments(c.ns).Patch(ctx, name, k8stypes.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	took := wait.ForEvery(t, 5*time.Minute, time.Second, func() string {
		d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("the rollout did not complete: %v", err)
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != 3 ||
			d.Status.ReadyReplicas != 3 || d.Status.Replicas != 3 {
			return fmt.Sprintf("the rollout did not complete: %+v", d.Status)
		}
		return ""
	})
	t.Logf("rollout restart complete after %v", took.Round(time.Second))
	fresh := eppPods(t, c)
	now := map[string]string{}
	for _, p := range fresh {
		for _, o := range old {
			if p.Name == o.Name {
				t.Fatalf("pod %s survived the rollout restart", p.Name)
			}
		}
		now[p.Name] = c.forward(t, p.Name)
	}
	waitLoads(t, "the new replicas in sync after the rollout", 60*time.Second, now, idle)
	time.Sleep(2 * time.Second) // a last poll of every replica

	w.mu.Lock()
	defer w.mu.Unlock()
	replaced := map[string]bool{}
	for _, p := range old {
		replaced[p.Name] = true
	}
	var counted []string
	for pod, reasons := range w.seen {
		for reason, n := range reasons {
			role := "new"
			if replaced[pod] {
				role = "replaced"
			}
			counted = append(counted, fmt.Sprintf("%s (%s) %s=%v", pod, role, reason, n))
			for _, line := range w.refused[pod] {
				t.Logf("%s's log: %s", pod, line)
			}
		}
	}
	for _, p := range append(old, fresh...) {
		if w.polls[p.Name] == 0 {
			t.Errorf("%s's /debug/peer-sync was never read: its rejections are unknown", p.Name)
		}
	}
	if len(counted) > 0 {
		t.Errorf("peer-sync rejections counted during the rollout restart: %s", strings.Join(counted, ", "))
	}
	t.Logf("read the rejections of %d replicas during the rollout: none counted", len(w.polls))
}
