// Package eppreplica describes the EPP build of this module (cmd/epp) run as
// replica processes of one EPP against a real API server, as this module's
// integration tests and the routing benchmark run it: each replica's identity
// (POD_NAME, POD_IP in the test network namespace, NAMESPACE), its ports on
// 127.0.0.1, its flags (upstream's standalone mode on model-server pods labelled
// app=vllm), how the processes start (Launch: ports from below the ephemeral
// range, up once they listen on them, started again on other ports when one was
// taken), the Service's EndpointSlices that list the replicas, and the
// model-server pods the EPP finds.
package eppreplica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
)

// Service is the EPP's Service, whose slices list the replicas.
const Service = "epp"

// ModelServerLabel and ModelServerPort are what the replicas select model servers
// by (--endpoint-selector, --endpoint-target-ports).
const (
	ModelServerLabel = "app=vllm"
	ModelServerPort  = 8000
)

// Replica is one EPP process's identity and addresses.
type Replica struct {
	Pod        string // POD_NAME: <deployment>-<hash>-<suffix>, as upstream's standalone mode needs
	IP         string // POD_IP: an identity only, never dialed, unless the replica syncs state
	Debug      string // the discovery plugin's debugAddress (/debug/peers, /debug/peer-sync)
	Metrics    string // the EPP's metrics port
	GRPC       string // the EPP's ext_proc port
	GRPCHealth string
	SyncPort   int32 // the peer-sync port on IP
}

// New is replica i: IP netns.Addr(10+i), ports of its own (see Port), a pod of
// ReplicaSet PodTemplateHash.
func New(i int) *Replica { return NewInReplicaSet(i, PodTemplateHash) }

// PodTemplateHash is the pod-template-hash of New's replicas.
const PodTemplateHash = "7d9f8c6b5"

// NewInReplicaSet is replica i as a pod of the ReplicaSet whose pod-template-hash
// is hash (a rolling update's new one): POD_NAME epp-<hash>-r<i>, IP
// netns.Addr(10+i), ports of its own.
func NewInReplicaSet(i int, hash string) *Replica {
	r := &Replica{Pod: fmt.Sprintf("%s-%s-r%d", Service, hash, i), IP: netns.Addr(10 + i)}
	r.pickPorts()
	return r
}

// pickPorts gives r new ports (see Port).
func (r *Replica) pickPorts() {
	local := func() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port("127.0.0.1"))) }
	r.Debug, r.Metrics, r.GRPC, r.GRPCHealth = local(), local(), local(), local()
	r.SyncPort = int32(Port(r.IP))
}

// Ports are handed out from firstPort up, below the kernel's ephemeral range
// (32768 and up by default): a port the kernel picks for an outgoing connection
// (a replica's to the API server, to a model server, to a peer) can then never
// take a replica's port between its choice and the replica's listen, which a
// port "free a moment ago" from the ephemeral range can (seen with 8 replicas
// starting at once).
const (
	firstPort = 20000
	lastPort  = 32767
)

var nextPort atomic.Int32

func init() { nextPort.Store(firstPort - 1) }

// Port is a TCP port of ip that no replica of this process was given and that is
// free now, below the ephemeral range. Another process can still take it before
// the replica binds it (another test binary picking from the same range, say):
// Launch.Start then starts the replica again on other ports.
func Port(ip string) int {
	for {
		p := int(nextPort.Add(1))
		if p > lastPort {
			panic(fmt.Sprintf("eppreplica: no port left from %d to %d", firstPort, lastPort))
		}
		if l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p))); err == nil {
			_ = l.Close()
			return p
		}
	}
}

// Launch is how replica processes of an EPP build start.
type Launch struct {
	Bin        string   // the EPP build
	Kubeconfig string   // the API server's kubeconfig file (KUBECONFIG)
	Dir        string   // where each replica's HOME is made, Dir/<pod>
	Args       []string // flags after every replica's own (see Args)
	Env        []string // environment besides every replica's own (see Env)
	// BeforeStart, if set, runs before each start of a replica (attempt 0 first),
	// once its ports are picked: a hook for tests of the start itself.
	BeforeStart func(r *Replica, attempt int)
	// Logf, if set, is told when a replica is started again on other ports.
	Logf func(format string, args ...any)
}

// startAttempts bounds how often a replica is started, the first start included.
const startAttempts = 5

// listenWithin is how long one start may take until the replica listens.
const listenWithin = 90 * time.Second

// Start starts the replicas rs in namespace ns, all at once, each with the
// configuration config(i) (asked again at each start of rs[i], once its ports are
// picked), and returns once each listens on all of its ports: upstream's gRPC,
// health and metrics ports, and the discovery plugin's debug and peer-sync
// addresses where its configuration names them (proc.Listen: the replica's own
// sockets). The ports come from below the ephemeral range (Port); a replica that
// still exits with "address already in use" (another process took a port between
// the pick and the bind) is started again on new ports, up to startAttempts
// times. procs[i] is rs[i]'s process (stop it with Stop, or in a test Supervise),
// nil where rs[i] did not start; err says, per replica, why.
func (l Launch) Start(ns string, rs []*Replica, config func(i int) string) (procs []*proc.Process, err error) {
	procs = make([]*proc.Process, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i := range rs {
		wg.Go(func() {
			procs[i], errs[i] = l.start(ns, rs[i], func() string { return config(i) })
			if errs[i] != nil {
				errs[i] = fmt.Errorf("replica %s: %w", rs[i].Pod, errs[i])
			}
		})
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// start starts replica r: attempt 0 on its ports, the others on new ones.
func (l Launch) start(ns string, r *Replica, config func() string) (*proc.Process, error) {
	home := filepath.Join(l.Dir, r.Pod)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			r.pickPorts()
		}
		cfg := config()
		listens := []string{r.GRPC, r.GRPCHealth, r.Metrics}
		for _, a := range []string{r.Debug, r.SyncAddress()} {
			if strings.Contains(cfg, a) {
				listens = append(listens, a)
			}
		}
		if l.BeforeStart != nil {
			l.BeforeStart(r, attempt)
		}
		p, err := proc.Listen(l.Bin, r.Args(ns, cfg, l.Args...), append(r.Env(os.Getenv("PATH"), home, l.Kubeconfig, ns), l.Env...), listens, listenWithin)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt+1 == startAttempts {
			return nil, fmt.Errorf("start %d of %d: %w", attempt+1, startAttempts, err)
		}
		if l.Logf != nil {
			l.Logf("replica %s: a port was taken before it bound it; starting it again on other ports", r.Pod)
		}
	}
}

// SyncAddress is the replica's peer-sync address, ip:port.
func (r *Replica) SyncAddress() string {
	return net.JoinHostPort(r.IP, strconv.Itoa(int(r.SyncPort)))
}

// Args are the replica's flags in namespace ns with configuration config (the EPP
// configuration's text), followed by extra.
func (r *Replica) Args(ns, config string, extra ...string) []string {
	port := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
	return append([]string{
		"--endpoint-selector=" + ModelServerLabel, "--endpoint-target-ports=" + strconv.Itoa(ModelServerPort), "--pool-namespace=" + ns,
		"--grpc-port=" + port(r.GRPC), "--grpc-health-port=" + port(r.GRPCHealth), "--metrics-port=" + port(r.Metrics),
		"--metrics-endpoint-auth=false", "--secure-serving=false", "--drain-timeout=1s", "--config-text=" + config,
	}, extra...)
}

// Env is the replica's environment, as the downward API gives it, with kubeconfig
// and home.
func (r *Replica) Env(path, home, kubeconfig, ns string) []string {
	return []string{"PATH=" + path, "HOME=" + home, "KUBECONFIG=" + kubeconfig,
		"POD_NAME=" + r.Pod, "POD_IP=" + r.IP, "NAMESPACE=" + ns}
}

// Ready asks the replica's gRPC health server for its readiness service, as the
// kubelet's grpc probe does.
func (r *Replica) Ready(ctx context.Context) (healthpb.HealthCheckResponse_ServingStatus, error) {
	return Readiness(ctx, r.GRPCHealth)
}

// Readiness asks the gRPC health server at addr (127.0.0.1 only) for its readiness
// service.
func Readiness(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		return 0, fmt.Errorf("refusing to dial %s: tests talk to 127.0.0.1 only", addr)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

// ModelServerPods creates a model-server pod (labelled app=vllm) for each address
// in ips, Running and Ready with that address, as the EPP's standalone mode finds
// its endpoints, and returns the EPP's endpoint ID of each.
func ModelServerPods(ctx context.Context, cs kubernetes.Interface, ns string, ips []string) ([]string, error) {
	key, value, _ := strings.Cut(ModelServerLabel, "=")
	var ids []string
	for i, ip := range ips {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vllm-%d", i), Namespace: ns, Labels: map[string]string{key: value}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm:test", Ports: []corev1.ContainerPort{{ContainerPort: ModelServerPort}}}}},
		}
		created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		ids = append(ids, ns+"/"+pod.Name+"-rank-0") // the EPP's endpoint ID of the pod's one rank
	}
	return ids, nil
}

// ApplySlice creates s in its namespace, or updates it, as the EndpointSlice
// controller would write it (managed by manager).
func ApplySlice(ctx context.Context, cs kubernetes.Interface, s discoveryv1.EndpointSlice, manager string) error {
	s.Annotations = map[string]string{discoveryv1.LabelManagedBy: manager}
	api := cs.DiscoveryV1().EndpointSlices(s.Namespace)
	if cur, err := api.Get(ctx, s.Name, metav1.GetOptions{}); err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err := api.Update(ctx, &s, metav1.UpdateOptions{})
		return err
	}
	_, err := api.Create(ctx, &s, metav1.CreateOptions{})
	return err
}

// WriteSyncSlices writes the Service's slices as the EndpointSlice controller would
// for the replicas rs of which members are in the Service: one slice per replica,
// since each has a peer-sync port of its own (they share one machine); the others'
// slices are deleted.
func WriteSyncSlices(ctx context.Context, cs kubernetes.Interface, ns string, rs []*Replica, members []int, manager string) error {
	for i, r := range rs {
		if !slices.Contains(members, i) {
			if err := DeleteSyncSlice(ctx, cs, ns, i); err != nil {
				return err
			}
			continue
		}
		if err := WriteSyncSlice(ctx, cs, ns, i, r, manager); err != nil {
			return err
		}
	}
	return nil
}

// WriteSyncSlice writes the slice of replica r, the i-th of its Service (slice
// epp-r<i>), listing it ready, or with the conditions opts set (slicegen.NotReady
// while it starts, slicegen.TerminatingServing once it is deleted), as the
// EndpointSlice controller writes a pod's conditions during a rolling update.
func WriteSyncSlice(ctx context.Context, cs kubernetes.Interface, ns string, i int, r *Replica, manager string, opts ...slicegen.EndpointOption) error {
	s := slicegen.Slice(syncSliceName(i), slicegen.Namespace(ns), slicegen.Service(Service), slicegen.Ports("peer-sync", int(r.SyncPort)), slicegen.Pod(r.Pod, r.IP, opts...))
	return ApplySlice(ctx, cs, s, manager)
}

// DeleteSyncSlice deletes the slice of the i-th replica, if there is one.
func DeleteSyncSlice(ctx context.Context, cs kubernetes.Interface, ns string, i int) error {
	if err := cs.DiscoveryV1().EndpointSlices(ns).Delete(ctx, syncSliceName(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func syncSliceName(i int) string { return "epp-r" + strconv.Itoa(i) }
