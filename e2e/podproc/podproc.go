// Package podproc is the process runtime of the local backend: for every pod of a
// Deployment that KWOK marks Running, it starts one process for each of the pod's
// containers, the binary its image names (bin/epp for the epp image, bin/epp-llmd
// for llm-d-router's EPP with the plugin), as those containers would run, and stops
// them when the pod goes away.
//
// Native sidecars (init containers with restartPolicy Always) start first, in order,
// each waited for until its startup probe passes, then the containers. Every process
// gets its container's args and env as deployed (downward-API values resolved from
// the live Pod, valueFrom Secrets and ConfigMaps read from the API, $(VAR) references
// expanded), with the changes a real pod does not need: its bind addresses move to
// free 127.0.0.1 ports, each emptyDir volume is a folder of the pod's own (paths under
// its mount point, in args and env, point there), each ConfigMap volume a folder with
// the ConfigMap's keys as files, read when the container starts, and a container that
// gets the ServiceAccount token (the pod's automount, or a projected token volume it
// mounts) gets a kubeconfig with a real token for the pod's ServiceAccount
// (TokenRequest, bound to the Pod) instead of the in-cluster config. llm-d-router's
// EPP gets free ports for --grpc-port, --grpc-health-port and --metrics-port, and
// 127.0.0.1 addresses for the plugin's EPP_PEER_DEBUG_ADDRESS and
// EPP_PEER_SYNC_ADDRESS. So the deployed RBAC, flags,
// env and volumes are exercised exactly. Nothing ever dials the pod IPs. Init
// containers that run to completion are not supported; a process that exits is not
// restarted.
package podproc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// Kind says how a binary takes its addresses.
type Kind int

const (
	// Epp is bin/epp: --metrics-bind-address (/metrics and /debug/peers),
	// --health-probe-bind-address, --peer-sync-bind-address, --kubeconfig.
	Epp Kind = iota
	// LLMDRouter is llm-d-router's EPP: --grpc-port, --grpc-health-port,
	// --metrics-port, KUBECONFIG; the plugin's /debug/peers on EPP_PEER_DEBUG_ADDRESS.
	LLMDRouter
)

// Binary is what runs a container of an image.
type Binary struct {
	Path string
	Kind Kind
}

// Binaries are the binaries by image repository (without registry host, tag or
// digest), e.g. "epp-peer-discovery/epp".
type Binaries map[string]Binary

// DefaultBinaries are the project's two images in bin/ under root.
func DefaultBinaries(root string) Binaries {
	return Binaries{
		"epp-peer-discovery/epp":              {Path: filepath.Join(root, "bin", "epp"), Kind: Epp},
		"epp-peer-discovery/llm-d-router-epp": {Path: filepath.Join(root, "bin", "epp-llmd"), Kind: LLMDRouter},
	}
}

// For returns the binary of image.
func (b Binaries) For(image string) (Binary, error) {
	repo := image
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for key, bin := range b {
		if repo == key || strings.HasSuffix(repo, "/"+key) {
			if _, err := os.Stat(bin.Path); err != nil {
				return Binary{}, fmt.Errorf("image %s: %w (make build, make build-llmd)", image, err)
			}
			return bin, nil
		}
	}
	return Binary{}, fmt.Errorf("image %s: the local runtime has no binary for it", image)
}

// Replica is one pod: one running process per container.
type Replica struct {
	Pod, PodIP string
	UID        types.UID
	// MetricsAddr serves the /metrics of the runtime's main container, PeersAddr its
	// /debug/peers (the same address for epp; the plugin's for llm-d-router's EPP,
	// empty without one), ProbeAddr its probes (HTTP /healthz and /readyz for epp,
	// the gRPC health port for llm-d-router's EPP).
	MetricsAddr, PeersAddr, ProbeAddr string
	// Processes are the pod's containers in start order (native sidecars first).
	Processes []*Process
	dir       string
}

// Process is one container's process.
type Process struct {
	Container string
	Kind      Kind
	// MetricsAddr, PeersAddr and ProbeAddr are where its addresses moved
	// (127.0.0.1), as in Replica.
	MetricsAddr, PeersAddr, ProbeAddr string
	// ExtProcAddr is where llm-d-router's EPP serves ext_proc (its --grpc-port,
	// moved to 127.0.0.1); "" for epp.
	ExtProcAddr string
	// Args and Env are what the process got.
	Args []string
	Env  []string

	cmd    *exec.Cmd
	done   chan struct{}
	log    string // stdout and stderr
	stdout string // stdout alone
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stdout returns what the process wrote to its stdout so far (its log has stdout
// and stderr interleaved).
func (p *Process) Stdout() string {
	b, _ := os.ReadFile(p.stdout)
	return string(b)
}

// Process returns the process of the named container, or nil.
func (r *Replica) Process(container string) *Process {
	for _, p := range r.Processes {
		if p.Container == container {
			return p
		}
	}
	return nil
}

// Log returns the output of every container so far.
func (r *Replica) Log() string {
	var b strings.Builder
	for _, p := range r.Processes {
		fmt.Fprintf(&b, "[container %s]\n%s", p.Container, p.Log())
	}
	return b.String()
}

// Log returns the process's output so far, stdout and stderr.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Runtime runs the pods of one namespace matching a label selector.
type Runtime struct {
	cs        kubernetes.Interface
	cfg       *rest.Config
	bins      Binaries
	namespace string
	selector  string
	container string
	dir       string

	mu       sync.Mutex
	replicas map[types.UID]*Replica
	stopping sync.WaitGroup // replicas of pods that went, stopping
	errs     []error
	stopped  chan struct{}
}

// New returns a runtime for the pods of namespace matching selector
// (e.g. "app.kubernetes.io/name=epp"), whose main container is container, running
// each container with the binary of its image.
func New(cfg *rest.Config, bins Binaries, namespace, selector, container string) (*Runtime, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "epp-podproc-")
	if err != nil {
		return nil, err
	}
	return &Runtime{cs: cs, cfg: cfg, bins: bins, namespace: namespace, selector: selector, container: container, dir: dir,
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
	// Stopped in the background, as a kubelet does: llm-d-router's EPP drains for
	// up to 10 s here, and new pods must not wait for that.
	for _, rep := range stale {
		r.stopping.Go(func() { stopReplica(rep) })
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
	rep := &Replica{Pod: pod.Name, PodIP: pod.Status.PodIP, UID: pod.UID, dir: filepath.Join(r.dir, pod.Name+"-"+string(pod.UID)[:8])}
	if err := os.MkdirAll(rep.dir, 0o755); err != nil {
		return nil, err
	}
	var order []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			return nil, fmt.Errorf("init container %s runs to completion: not supported by the local runtime", c.Name)
		}
		order = append(order, c)
	}
	order = append(order, pod.Spec.Containers...)
	var kubeconfig string
	for i := range order {
		c := &order[i]
		if kubeconfig == "" && getsToken(pod, c) {
			var err error
			if kubeconfig, err = r.tokenKubeconfig(ctx, pod); err != nil {
				stopReplica(rep)
				return nil, err
			}
		}
		proc, err := r.startListening(ctx, pod, rep, c, kubeconfig)
		if err != nil {
			stopReplica(rep)
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		rep.Processes = append(rep.Processes, proc)
		if i < len(pod.Spec.InitContainers) {
			// A native sidecar: the next container starts once it has started.
			if err := waitStarted(ctx, proc, c); err != nil {
				stopReplica(rep)
				return nil, fmt.Errorf("sidecar %s: %w", c.Name, err)
			}
		}
	}
	main := rep.Process(r.container)
	if main == nil {
		stopReplica(rep)
		return nil, fmt.Errorf("no container %q", r.container)
	}
	rep.MetricsAddr, rep.PeersAddr, rep.ProbeAddr = main.MetricsAddr, main.PeersAddr, main.ProbeAddr
	return rep, nil
}

// getsToken reports whether the container gets the pod's ServiceAccount token: the
// pod automounts it, or the container mounts a projected token volume.
func getsToken(pod *corev1.Pod, c *corev1.Container) bool {
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		return true
	}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					return true
				}
			}
		}
	}
	return false
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// startListening starts the container and waits until it listens on both of its
// addresses. The addresses were free when picked, but an outgoing connection of any
// process may take such a port before the process binds it; then the process exits
// with "address already in use" and is started again on new addresses (at most
// three times), as a kubelet restarts a container that failed.
func (r *Runtime) startListening(ctx context.Context, pod *corev1.Pod, rep *Replica, c *corev1.Container, kubeconfig string) (*Process, error) {
	for attempt := 1; ; attempt++ {
		p, err := r.startContainer(ctx, pod, rep, c, kubeconfig)
		if err != nil {
			return nil, err
		}
		err = waitListening(ctx, p)
		if err == nil {
			return p, nil
		}
		out, _ := os.ReadFile(p.log)
		if attempt == 3 || !strings.Contains(string(out), "address already in use") {
			return nil, fmt.Errorf("%w; output:\n%s", err, out)
		}
	}
}

// waitListening waits (at most 30 s) until the process accepts connections on its
// metrics and probe addresses.
func waitListening(ctx context.Context, p *Process) error {
	for deadline := time.Now().Add(30 * time.Second); ; {
		up := true
		for _, addr := range []string{p.MetricsAddr, p.ProbeAddr} {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				up = false
				break
			}
			conn.Close()
		}
		if up {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before listening on %s and %s", p.MetricsAddr, p.ProbeAddr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s and %s after 30s", p.MetricsAddr, p.ProbeAddr)
		}
	}
}

// startContainer starts the binary of c's image as container c of pod would run.
func (r *Runtime) startContainer(ctx context.Context, pod *corev1.Pod, rep *Replica, c *corev1.Container, kubeconfig string) (*Process, error) {
	bin, err := r.bins.For(c.Image)
	if err != nil {
		return nil, err
	}
	p := &Process{Container: c.Name, Kind: bin.Kind, MetricsAddr: testenv.FreeAddr(), ProbeAddr: testenv.FreeAddr(), done: make(chan struct{})}
	paths, err := r.volumes(ctx, pod, rep, c)
	if err != nil {
		return nil, err
	}
	rewrite := func(s string) string {
		for mount, dir := range paths {
			if s == mount || strings.HasPrefix(s, mount+"/") {
				return dir + strings.TrimPrefix(s, mount)
			}
			s = strings.ReplaceAll(s, "="+mount+"/", "="+dir+"/")
		}
		return s
	}
	env, err := r.resolveEnv(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	expand := func(a string) string {
		return varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if ref == "$$" {
				return "$"
			}
			if v, ok := vars[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref // undefined: left as written, as the kubelet does
		})
	}
	for i, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		// As the kubelet: $(VAR) of a variable defined before this one.
		value = rewrite(expand(value))
		if bin.Kind == LLMDRouter {
			switch name {
			case "EPP_PEER_DEBUG_ADDRESS":
				// The plugin's /debug/peers, on 127.0.0.1 of its own.
				p.PeersAddr = testenv.FreeAddr()
				value = p.PeersAddr
			case "EPP_PEER_SYNC_ADDRESS":
				// Every pod's peer-sync port on 127.0.0.1 of its own, as each pod has
				// its own IP. Nothing dials it: the local backend never probes.
				value = testenv.FreeAddr()
			}
		}
		env[i], vars[name] = name+"="+value, value
	}
	switch bin.Kind {
	case Epp:
		p.PeersAddr = p.MetricsAddr
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--metrics-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") || strings.HasPrefix(a, "--kubeconfig") {
				continue
			}
			if strings.HasPrefix(a, "--peer-sync-bind-address") {
				p.Args = append(p.Args, "--peer-sync-bind-address="+testenv.FreeAddr())
				continue
			}
			p.Args = append(p.Args, rewrite(expand(a)))
		}
		p.Args = append(p.Args, "--metrics-bind-address="+p.MetricsAddr, "--health-probe-bind-address="+p.ProbeAddr)
		if kubeconfig != "" && getsToken(pod, c) {
			p.Args = append(p.Args, "--kubeconfig="+kubeconfig)
		}
	case LLMDRouter:
		// Its ports are numbers on every interface: free ones, read on 127.0.0.1.
		p.ExtProcAddr = testenv.FreeAddr()
		ports := map[string]string{"--metrics-port": port(p.MetricsAddr), "--grpc-health-port": port(p.ProbeAddr), "--grpc-port": port(p.ExtProcAddr)}
		args := c.Args
		for i := 0; i < len(args); i++ {
			a := expand(args[i])
			name, _, hasValue := strings.Cut(a, "=")
			if _, ok := ports[name]; ok {
				if !hasValue {
					i++ // --flag value
				}
				continue
			}
			p.Args = append(p.Args, rewrite(a))
		}
		for _, name := range []string{"--grpc-port", "--grpc-health-port", "--metrics-port"} {
			p.Args = append(p.Args, name+"="+ports[name])
		}
		if kubeconfig != "" && getsToken(pod, c) {
			env = append(env, "KUBECONFIG="+kubeconfig)
		}
	}
	p.Env = env
	p.log, p.stdout = filepath.Join(rep.dir, c.Name+".log"), filepath.Join(rep.dir, c.Name+".stdout")
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	fout, err := os.Create(p.stdout)
	if err != nil {
		f.Close()
		return nil, err
	}
	p.cmd = exec.Command(bin.Path, p.Args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.dir}, env...)
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(f, fout), f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		fout.Close()
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); f.Close(); fout.Close(); close(p.done) }()
	return p, nil
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// volumes makes the emptyDir and ConfigMap volumes c mounts folders of the pod's
// own (a ConfigMap's as it is now, its keys or its items as files), and returns
// them by mount path.
func (r *Runtime) volumes(ctx context.Context, pod *corev1.Pod, rep *Replica, c *corev1.Container) (map[string]string, error) {
	paths := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.EmptyDir == nil && v.ConfigMap == nil {
				continue
			}
			dir := filepath.Join(rep.dir, "volumes", v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			paths[m.MountPath] = dir
			if v.ConfigMap == nil {
				continue
			}
			cm, err := r.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			files := map[string]string{}
			for k := range cm.Data {
				files[k] = k
			}
			if len(v.ConfigMap.Items) > 0 {
				files = map[string]string{}
				for _, it := range v.ConfigMap.Items {
					files[it.Key] = it.Path
				}
			}
			for key, file := range files {
				dst := filepath.Join(dir, file)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					return nil, err
				}
				if err := os.WriteFile(dst, []byte(cm.Data[key]), 0o644); err != nil {
					return nil, err
				}
			}
		}
	}
	return paths, nil
}

// waitStarted waits (at most 60 s, polling every 100 ms) until the process's startup
// probe passes: an HTTP GET of its path on the probe address (epp's probes are its
// only HTTP endpoints with a startup meaning). Without a startup probe the process
// counts as started at once, as the kubelet does.
func waitStarted(ctx context.Context, p *Process, c *corev1.Container) error {
	if c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil {
		return nil
	}
	url := "http://" + p.ProbeAddr + c.StartupProbe.HTTPGet.Path
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case <-p.done:
			return fmt.Errorf("exited before its startup probe passed")
		default:
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("startup probe %s not passing after 60s", url)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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
	path := filepath.Join(r.dir, pod.Name+"-"+string(pod.UID)[:8], "kubeconfig")
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
		wg.Go(func() { stopReplica(rep) })
	}
	wg.Wait()
	r.stopping.Wait()
}

// stopReplica stops the pod's containers in the reverse of their start order (the
// main containers before the sidecars, as the kubelet does).
func stopReplica(rep *Replica) {
	for i := len(rep.Processes) - 1; i >= 0; i-- {
		p := rep.Processes[i]
		proc.Terminate(p.cmd.Process, p.done, 10*time.Second)
	}
}

// Views reads the /debug/peers of the main container of each live pod (through
// 127.0.0.1), keyed by pod name. Pods without processes yet are left out.
func (r *Runtime) Views(ctx context.Context, live []corev1.Pod) map[string]peerview.View {
	return r.ViewsOf(ctx, live, r.container)
}

// ViewsOf is Views for the named container (a sidecar's, say).
func (r *Runtime) ViewsOf(ctx context.Context, live []corev1.Pod, container string) map[string]peerview.View {
	byUID := map[types.UID]*Replica{}
	for _, rep := range r.Replicas() {
		byUID[rep.UID] = rep
	}
	out := map[string]peerview.View{}
	for _, p := range live {
		rep, ok := byUID[p.UID]
		if !ok {
			continue
		}
		if proc := rep.Process(container); proc != nil && proc.PeersAddr != "" {
			doc, err := peerview.Fetch(ctx, proc.PeersAddr)
			out[p.Name] = peerview.View{Doc: doc, Err: err}
		}
	}
	return out
}
