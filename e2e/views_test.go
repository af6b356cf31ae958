//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gruntwork-io/terratest/modules/k8s"
	corev1 "k8s.io/api/core/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/podproc"
)

// The containers whose /debug/peers the suite reads: the EPP container, and in
// sidecar mode the peer-discovery sidecar.
const (
	eppContainer     = "epp"
	sidecarContainer = "peer-discovery"
)

// peersPort is the container port of a container's /debug/peers in mode m: the
// plugin's http-peers port in llm-d-router's EPP, the stand-in consumer's metrics
// port in sidecar mode, the sidecar's metrics port; 0: none (peer discovery off).
func peersPort(container string, m mode) int {
	switch {
	case container == sidecarContainer:
		return 9091
	case m == on:
		return 9091
	case m == sidecar:
		return 9090
	}
	return 0
}

// metricsPort is the container port of a container's /metrics.
func metricsPort(container string) int {
	if container == sidecarContainer {
		return 9091
	}
	return 9090
}

// newViewer returns the backend's viewer of workload w in namespace ns.
func newViewer(t *testing.T, ns string, w workload, m mode) viewer {
	if backend == "local" {
		return newLocalViewer(t, ns, w)
	}
	return newKindViewer(ns, m)
}

// viewer reads each live pod's /debug/peers, of one of its containers, through
// 127.0.0.1. Pods without that container (yet) are left out.
type viewer interface {
	views(ctx context.Context, t *testing.T, live []corev1.Pod, container string) map[string]peerview.View
	// metrics reads /metrics of one container of each live pod.
	metrics(ctx context.Context, t *testing.T, live []corev1.Pod, container string) []string
	// logs returns a replica's output for failure reports.
	logs(t *testing.T, pod string) string
	close()
}

// localViewer: the replicas are processes run by podproc (bin/epp-llmd for
// llm-d-router's EPP, bin/epp for the sidecar and the stand-in consumer).
type localViewer struct {
	rt     *podproc.Runtime
	cancel context.CancelFunc
}

func newLocalViewer(t *testing.T, ns string, w workload) *localViewer {
	rt, err := podproc.New(local.Config, podproc.DefaultBinaries(repoRoot), ns, w.selector, eppContainer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go rt.Run(ctx)
	return &localViewer{rt: rt, cancel: cancel}
}

func (v *localViewer) views(ctx context.Context, t *testing.T, live []corev1.Pod, container string) map[string]peerview.View {
	for _, err := range v.rt.Errors() {
		t.Logf("process runtime: %v", err)
	}
	return v.rt.ViewsOf(ctx, live, container)
}

func (v *localViewer) metrics(ctx context.Context, _ *testing.T, live []corev1.Pod, container string) []string {
	byUID := map[string]*podproc.Replica{}
	for _, r := range v.rt.Replicas() {
		byUID[string(r.UID)] = r
	}
	var out []string
	for _, p := range live {
		if r, ok := byUID[string(p.UID)]; ok {
			if proc := r.Process(container); proc != nil {
				if text, err := peerview.FetchMetrics(ctx, proc.MetricsAddr); err == nil {
					out = append(out, text)
				}
			}
		}
	}
	return out
}

func (v *localViewer) logs(_ *testing.T, pod string) string {
	for _, r := range v.rt.Replicas() {
		if r.Pod == pod {
			return r.Log()
		}
	}
	return "(no process)"
}

func (v *localViewer) close() { v.cancel(); v.rt.Wait() }

// kindViewer: the replicas run in kind; each is read through a port-forward.
type kindViewer struct {
	ns      string
	mode    mode
	mu      sync.Mutex
	tunnels map[string]*k8s.Tunnel // by pod UID and port
}

func newKindViewer(ns string, m mode) *kindViewer {
	return &kindViewer{ns: ns, mode: m, tunnels: map[string]*k8s.Tunnel{}}
}

// endpoint returns 127.0.0.1:<port> forwarded to port of pod p, opened once.
func (v *kindViewer) endpoint(t *testing.T, p *corev1.Pod, port int) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := fmt.Sprintf("%s:%d", p.UID, port)
	tun, ok := v.tunnels[key]
	if !ok {
		tun = k8s.NewTunnel(kubectlOptions(v.ns), k8s.ResourceTypePod, p.Name, 0, port)
		if err := tun.ForwardPortE(t); err != nil {
			return "", fmt.Errorf("port-forward: %w", err)
		}
		v.tunnels[key] = tun
	}
	return tun.Endpoint(), nil
}

func (v *kindViewer) views(ctx context.Context, t *testing.T, live []corev1.Pod, container string) map[string]peerview.View {
	out := map[string]peerview.View{}
	port := peersPort(container, v.mode)
	for _, p := range live {
		if port == 0 || !hasContainer(&p, container) {
			continue
		}
		addr, err := v.endpoint(t, &p, port)
		if err != nil {
			out[p.Name] = peerview.View{Err: err}
			continue
		}
		doc, err := peerview.Fetch(ctx, addr)
		if err != nil {
			// A pod that is running but not listening yet (a standby of leader
			// election is a member before it is ready) breaks the forward opened too
			// early: open a new one next time.
			v.drop(&p, port)
		}
		out[p.Name] = peerview.View{Doc: doc, Err: err}
	}
	return out
}

// drop closes and forgets the forward to port of pod p.
func (v *kindViewer) drop(p *corev1.Pod, port int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := fmt.Sprintf("%s:%d", p.UID, port)
	if tun, ok := v.tunnels[key]; ok {
		tun.Close()
		delete(v.tunnels, key)
	}
}

func (v *kindViewer) metrics(ctx context.Context, t *testing.T, live []corev1.Pod, container string) []string {
	var out []string
	for _, p := range live {
		if !hasContainer(&p, container) {
			continue
		}
		if addr, err := v.endpoint(t, &p, metricsPort(container)); err == nil {
			if text, err := peerview.FetchMetrics(ctx, addr); err == nil {
				out = append(out, text)
			} else {
				v.drop(&p, metricsPort(container))
			}
		}
	}
	return out
}

func hasContainer(p *corev1.Pod, name string) bool {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

func (v *kindViewer) logs(t *testing.T, pod string) string {
	out, err := k8s.RunKubectlAndGetOutputContextE(t, context.Background(), kubectlOptions(v.ns), "logs", pod, "--all-containers", "--prefix", "--tail=40")
	if err != nil {
		return err.Error()
	}
	return out
}

func (v *kindViewer) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, tun := range v.tunnels {
		tun.Close()
	}
}
