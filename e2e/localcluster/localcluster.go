// Package localcluster runs a Kubernetes control plane on this machine without
// Docker: etcd and kube-apiserver (envtest), the real kube-controller-manager (the
// EndpointSlice, ReplicaSet, Deployment, namespace and ServiceAccount controllers
// among others) and kube-scheduler from bin/k8s, and KWOK, which plays the kubelet of
// one fake node: it marks scheduled pods Running and Ready and gives them IPs from
// 10.244.0.0/16. Those IPs exist nowhere: never dial them.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// PodCIDR is where KWOK takes the fake pod IPs from.
const PodCIDR = "10.244.0.0/16"

// DefaultPodCapacity is how many pods the fake node takes unless WithPodCapacity says.
const DefaultPodCapacity = 110

// Option changes how Start sets up the cluster.
type Option func(*settings)

type settings struct{ podCapacity int }

// WithPodCapacity gives the fake node room for n pods (the scale test runs 1,000
// and more).
func WithPodCapacity(n int) Option { return func(s *settings) { s.podCapacity = n } }

// NodeName is the fake node.
const NodeName = "kwok-node-0"

// Cluster is a running local control plane.
type Cluster struct {
	env *testenv.Env
	// Config and Clientset talk to the API server as admin.
	Config    *rest.Config
	Clientset *kubernetes.Clientset
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string

	dir      string
	procs    []*process
	log      io.Writer
	settings settings
}

type process struct {
	name string
	bin  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
	logf string
	// starts counts how often it was started: a component that exits before the
	// cluster is ready is started again, up to maxStarts in all.
	starts int
}

// maxStarts bounds the starts of a component that exits before the cluster is
// ready. KWOK v0.8.0 has been seen to panic once while it set up its metrics' CEL
// environment, 4 s after it started (seen once in this project's CI); the next start is a
// new process and goes on. A component that exits maxStarts times fails Start.
const maxStarts = 3

// Binaries says where the components are.
type Binaries struct {
	// K8sDir holds kube-controller-manager and kube-scheduler (and etcd and
	// kube-apiserver for envtest).
	K8sDir string
	// Kwok is the kwok binary; KwokStages its stages configuration.
	Kwok, KwokStages string
}

// DefaultBinaries are the ones `make e2e-tools` builds into bin/.
func DefaultBinaries() (Binaries, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		K8sDir:     filepath.Join(root, "bin", "k8s"),
		Kwok:       filepath.Join(root, "bin", "kwok"),
		KwokStages: filepath.Join(root, "bin", "kwok-stages.yaml"),
	}
	for _, p := range []string{filepath.Join(b.K8sDir, "kube-controller-manager"), filepath.Join(b.K8sDir, "kube-scheduler"), b.Kwok, b.KwokStages} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s not found: run `make e2e-tools` (make e2e-local and make test do it) to build it from the Go module proxy", p)
		}
	}
	return b, nil
}

// Start starts the control plane and waits until the fake node is Ready and the
// "default" ServiceAccount exists. progress (may be nil) receives one line per step.
// Call Stop, also when Start fails.
func Start(ctx context.Context, bins Binaries, progress io.Writer, opts ...Option) (*Cluster, error) {
	if progress == nil {
		progress = io.Discard
	}
	c := &Cluster{log: progress, settings: settings{podCapacity: DefaultPodCapacity}}
	for _, o := range opts {
		o(&c.settings)
	}
	var err error
	if c.dir, err = os.MkdirTemp("", "epp-localcluster-"); err != nil {
		return c, err
	}
	fmt.Fprintln(progress, "starting etcd and kube-apiserver")
	if c.env, err = testenv.Start(); err != nil {
		return c, err
	}
	c.Config, c.Clientset, c.Kubeconfig = c.env.Config, c.env.Clientset, c.env.Kubeconfig

	kcmPort, schedPort, kwokPort := port(testenv.FreeAddr()), port(testenv.FreeAddr()), testenv.FreeAddr()
	auth := []string{"--kubeconfig=" + c.Kubeconfig, "--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig}
	fmt.Fprintln(progress, "starting kube-controller-manager, kube-scheduler and kwok")
	if err := c.start("kube-controller-manager", filepath.Join(bins.K8sDir, "kube-controller-manager"), append(auth,
		"--leader-elect=false", "--controllers=*", "--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--secure-port="+kcmPort,
		// Fast reactions for tests: no batching of EndpointSlice updates, and room
		// for a thousand pods' worth of requests (the default is 20 per second).
		"--endpointslice-updates-batch-period=0s",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)...); err != nil {
		return c, err
	}
	if err := c.start("kube-scheduler", filepath.Join(bins.K8sDir, "kube-scheduler"), append(auth,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+schedPort,
	)...); err != nil {
		return c, err
	}
	if err := c.start("kwok", bins.Kwok,
		"--kubeconfig="+c.Kubeconfig,
		"--config="+bins.KwokStages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr="+PodCIDR,
		"--node-ip=10.255.0.1", // outside PodCIDR
		"--server-address="+kwokPort,
	); err != nil {
		return c, err
	}
	if err := c.createNode(ctx); err != nil {
		return c, err
	}
	fmt.Fprintln(progress, "waiting for the fake node and the default ServiceAccount")
	if err := c.waitReady(ctx, 2*time.Minute); err != nil {
		return c, err
	}
	if err := c.warmUpPodIPs(ctx, time.Minute); err != nil {
		return c, err
	}
	return c, nil
}

// warmUpPodIPs runs one pod through KWOK before any test does. KWOK v0.8.0 creates a
// CIDR's IP pool on first use without holding a lock (a load, then a store), so
// pods that reach it together at the very start can each get a pool of their own
// and the same IP (seen: two replicas with 10.244.0.1, each then its own "self").
// One pod first makes the pool exist; it is deleted again.
func (c *Cluster) warmUpPodIPs(ctx context.Context, timeout time.Duration) error {
	pods := c.Clientset.CoreV1().Pods("default")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-ip-warm-up"},
		Spec: corev1.PodSpec{NodeName: NodeName, Containers: []corev1.Container{{Name: "warm-up", Image: "none"}},
			AutomountServiceAccountToken: ptr.To(false)},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the IP warm-up pod: %w", err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		return p.Status.PodIP != "", nil
	})
	if err != nil {
		return fmt.Errorf("the IP warm-up pod got no IP from KWOK within %s: %w (last: %s)", timeout, err, last)
	}
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return fmt.Errorf("deleting the IP warm-up pod: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the IP warm-up pod was not gone within %s: %w", timeout, err)
	}
	return nil
}

func (c *Cluster) start(name, bin string, args ...string) error {
	p := &process{name: name, bin: bin, args: args, logf: filepath.Join(c.dir, name+".log")}
	if err := c.run(p); err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// run starts p's binary, appending to its log, so a log shows every start.
func (c *Cluster) run(p *process) error {
	f, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	if p.starts > 1 {
		fmt.Fprintf(f, "--- localcluster: start %d of %s\n", p.starts, p.name)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return nil
}

func (c *Cluster) createNode(ctx context.Context) error {
	pods := resource.MustParse(fmt.Sprint(c.settings.podCapacity))
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      map[string]string{"kubernetes.io/hostname": NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: pods,
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: pods,
			},
		},
	}
	_, err := c.Clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the fake node: %w", err)
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.procs {
			select {
			case <-p.done:
				if p.starts >= maxStarts {
					return false, fmt.Errorf("%s exited %d times before the cluster was ready, the last time with: %s", p.name, p.starts, c.tail(p, 20))
				}
				fmt.Fprintf(c.log, "%s exited before the cluster was ready; starting it again (%d of %d): %s\n", p.name, p.starts+1, maxStarts, c.tail(p, 20))
				if err := c.run(p); err != nil {
					return false, err
				}
			default:
			}
		}
		node, err := c.Clientset.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			last = "node " + NodeName + " not Ready (kwok)"
			return false, nil
		}
		if _, err := c.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = "no default ServiceAccount yet (kube-controller-manager): " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("local cluster not ready after %s: %w (last: %s)", timeout, err, last)
	}
	return nil
}

// tail returns the last n lines of a component's log, after the line that says why
// it crashed, when a crash printed one above them (a Go panic prints its cause first
// and then its stack, which the last lines alone cut off).
func (c *Cluster) tail(p *process, n int) string {
	b, _ := os.ReadFile(p.logf)
	return logExcerpt(string(b), n)
}

// logExcerpt is tail's text: the last "panic:" or "fatal error:" line above the
// last n lines, if any, then those lines, each on a line of its own.
func logExcerpt(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	start := max(len(lines)-n, 0)
	out := ""
	for i := start - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic: ") || strings.HasPrefix(lines[i], "fatal error: ") {
			out += "\n  " + lines[i] + "\n  ..."
			break
		}
		if strings.HasPrefix(lines[i], "--- localcluster: start ") {
			break // an earlier start's crash, not this one's
		}
	}
	for _, l := range lines[start:] {
		out += "\n  " + l
	}
	return out
}

// Logs returns the last n lines of every component's log, for failure reports.
func (c *Cluster) Logs(n int) string {
	out := ""
	for _, p := range c.procs {
		out += fmt.Sprintf("--- %s (%s)%s\n", p.name, p.logf, c.tail(p, n))
	}
	return out
}

// Stop stops every component (SIGTERM, then SIGKILL after 10 s) and removes the
// temporary files.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Go(func() { proc.Terminate(p.cmd.Process, p.done, 10*time.Second) })
	}
	wg.Wait()
	if c.env != nil {
		c.env.Stop()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
