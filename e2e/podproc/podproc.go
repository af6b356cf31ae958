// Package podproc is the process runtime of the local backend: for every pod of a
// Deployment that KWOK marks Running, it starts bin/epp as that pod's container
// would run, and stops it when the pod goes away.
//
// The process gets the container's args and env as deployed (downward-API values
// resolved from the live Pod, valueFrom Secrets and ConfigMaps read from the API),
// with two changes a real pod does not need: its bind addresses move to free
// 127.0.0.1 ports, and, when the pod mounts a ServiceAccount token, it gets a
// kubeconfig with a real token for the pod's ServiceAccount (TokenRequest, bound to
// the Pod) instead of the in-cluster config. So the deployed RBAC, flags and env are
// exercised exactly. Nothing ever dials the pod IPs.
package podproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// Replica is one running epp process standing in for a pod.
type Replica struct {
	Pod, PodIP string
	UID        types.UID
	// MetricsAddr serves /debug/peers and /metrics; ProbeAddr /healthz and /readyz.
	MetricsAddr, ProbeAddr string
	// Args and Env are what the process got.
	Args []string
	Env  []string

	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Log returns the process's output so far.
func (r *Replica) Log() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

// Runtime runs the pods of one namespace matching a label selector.
type Runtime struct {
	cs        kubernetes.Interface
	cfg       *rest.Config
	bin       string
	namespace string
	selector  string
	container string
	dir       string

	mu       sync.Mutex
	replicas map[types.UID]*Replica
	errs     []error
	stopped  chan struct{}
}

// New returns a runtime for the pods of namespace matching selector
// (e.g. "app.kubernetes.io/name=epp"), running container with bin.
func New(cfg *rest.Config, bin, namespace, selector, container string) (*Runtime, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "epp-podproc-")
	if err != nil {
		return nil, err
	}
	return &Runtime{cs: cs, cfg: cfg, bin: bin, namespace: namespace, selector: selector, container: container, dir: dir,
		replicas: map[types.UID]*Replica{}, stopped: make(chan struct{})}, nil
}

// Run keeps the processes in step with the pods, polling every 100 ms, until ctx ends;
// then it stops every process.
func (r *Runtime) Run(ctx context.Context) {
	defer close(r.stopped)
	defer r.stopAll()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Wait blocks until Run has returned and every process has stopped.
func (r *Runtime) Wait() { <-r.stopped; _ = os.RemoveAll(r.dir) }

// Errors returns the errors met while starting processes.
func (r *Runtime) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Replicas returns the running processes ordered by pod name.
func (r *Runtime) Replicas() []*Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Replica
	for _, rep := range r.replicas {
		out = append(out, rep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// Running reports whether the pod should have a process: KWOK marked it Running,
// it has an IP, and it is not being deleted.
func Running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

func (r *Runtime) sync(ctx context.Context) error {
	pods, err := r.cs.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: r.selector})
	if err != nil {
		return err
	}
	want := map[types.UID]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; Running(p) {
			want[p.UID] = p
		}
	}
	r.mu.Lock()
	var stale []*Replica
	for uid, rep := range r.replicas {
		if _, ok := want[uid]; !ok {
			stale = append(stale, rep)
			delete(r.replicas, uid)
		}
	}
	var missing []*corev1.Pod
	for uid, p := range want {
		if _, ok := r.replicas[uid]; !ok {
			missing = append(missing, p)
		}
	}
	r.mu.Unlock()
	for _, rep := range stale {
		stop(rep)
	}
	for _, p := range missing {
		rep, err := r.start(ctx, p)
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		r.mu.Lock()
		r.replicas[p.UID] = rep
		r.mu.Unlock()
	}
	return nil
}

func (r *Runtime) start(ctx context.Context, pod *corev1.Pod) (*Replica, error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == r.container {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("no container %q", r.container)
	}
	rep := &Replica{Pod: pod.Name, PodIP: pod.Status.PodIP, UID: pod.UID, MetricsAddr: testenv.FreeAddr(), ProbeAddr: testenv.FreeAddr(), done: make(chan struct{})}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--metrics-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") || strings.HasPrefix(a, "--kubeconfig") {
			continue
		}
		rep.Args = append(rep.Args, a)
	}
	rep.Args = append(rep.Args, "--metrics-bind-address="+rep.MetricsAddr, "--health-probe-bind-address="+rep.ProbeAddr)
	env, err := r.resolveEnv(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	rep.Env = env
	if automount := pod.Spec.AutomountServiceAccountToken; automount == nil || *automount {
		kc, err := r.tokenKubeconfig(ctx, pod)
		if err != nil {
			return nil, err
		}
		rep.Args = append(rep.Args, "--kubeconfig="+kc)
	}
	rep.log = filepath.Join(r.dir, pod.Name+"-"+string(pod.UID)[:8]+".log")
	f, err := os.Create(rep.log)
	if err != nil {
		return nil, err
	}
	rep.cmd = exec.Command(r.bin, rep.Args...)
	rep.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.dir}, env...)
	rep.cmd.Stdout, rep.cmd.Stderr = f, f
	rep.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := rep.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = rep.cmd.Wait(); f.Close(); close(rep.done) }()
	return rep, nil
}

// resolveEnv turns the container's env into NAME=value strings as the kubelet would.
func (r *Runtime) resolveEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	var out []string
	for _, e := range c.Env {
		v, err := r.envValue(ctx, pod, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

func (r *Runtime) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	src := e.ValueFrom
	switch {
	case src == nil:
		return e.Value, nil
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case "status.podIP":
			return pod.Status.PodIP, nil
		case "status.hostIP":
			return pod.Status.HostIP, nil
		case "status.podIPs":
			var ips []string
			for _, ip := range pod.Status.PodIPs {
				ips = append(ips, ip.IP)
			}
			return strings.Join(ips, ","), nil
		}
		return "", fmt.Errorf("fieldRef %s is not supported by the local runtime", src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		s, err := r.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := r.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	}
	return "", fmt.Errorf("valueFrom %+v is not supported by the local runtime", src)
}

// tokenKubeconfig writes a kubeconfig with a token for the pod's ServiceAccount,
// bound to the pod (it stops working when the pod is deleted, like a projected token).
func (r *Runtime) tokenKubeconfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := r.cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	path := filepath.Join(r.dir, pod.Name+"-"+string(pod.UID)[:8]+".kubeconfig")
	cfg := &rest.Config{Host: r.cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: r.cfg.CAData}, BearerToken: tr.Status.Token}
	return path, testenv.WriteKubeconfig(cfg, path)
}

func (r *Runtime) stopAll() {
	r.mu.Lock()
	reps := r.replicas
	r.replicas = map[types.UID]*Replica{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, rep := range reps {
		wg.Go(func() { stop(rep) })
	}
	wg.Wait()
}

func stop(rep *Replica) {
	_ = rep.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-rep.done:
	case <-time.After(10 * time.Second):
		_ = rep.cmd.Process.Kill()
		<-rep.done
	}
}

// Views reads the /debug/peers of the process of each live pod (through 127.0.0.1),
// keyed by pod name. Pods without a process yet are left out.
func (r *Runtime) Views(ctx context.Context, live []corev1.Pod) map[string]peerview.View {
	byUID := map[types.UID]*Replica{}
	for _, rep := range r.Replicas() {
		byUID[rep.UID] = rep
	}
	out := map[string]peerview.View{}
	for _, p := range live {
		if rep, ok := byUID[p.UID]; ok {
			doc, err := peerview.Fetch(ctx, rep.MetricsAddr)
			out[p.Name] = peerview.View{Doc: doc, Err: err}
		}
	}
	return out
}
