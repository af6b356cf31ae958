package podwatch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubeconfig"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubewatch"
)

// Options tune the source. The zero value is the default.
type Options struct {
	// RESTConfig reaches the API server; without it, LoadConfig loads one when the
	// source runs, else kubeconfig.Load("").
	RESTConfig *rest.Config
	LoadConfig func() (*rest.Config, error)
	// Watch tunes the health checks (kubewatch.Options).
	Watch kubewatch.Options
}

// Source is the pod peer source (a discovery.Source).
type Source struct {
	cfg  Config
	pub  *discovery.Publisher
	log  logr.Logger
	opts Options

	mu     sync.Mutex // guards pods and synced
	pods   map[string]*corev1.Pod
	synced bool
}

var _ discovery.Source = (*Source)(nil)

// NewSource returns the source for cfg, publishing through pub.
func NewSource(cfg Config, pub *discovery.Publisher, log logr.Logger, opts Options) *Source {
	return &Source{cfg: cfg, pub: pub, log: log.WithValues("selector", cfg.Selector), opts: opts, pods: map[string]*corev1.Pod{}}
}

// Run lists and watches the pods until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	cfg := s.opts.RESTConfig
	if cfg == nil {
		load := s.opts.LoadConfig
		if load == nil {
			load = func() (*rest.Config, error) { return kubeconfig.Load("") }
		}
		var err error
		if cfg, err = load(); err != nil {
			return fmt.Errorf("pod peer discovery: %w", err)
		}
	}
	ns := s.cfg.Namespace
	t := kubewatch.Target{Resource: "pods", Namespace: ns, Selector: s.cfg.Selector, Object: &corev1.Pod{},
		List: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Pods(ns).List(ctx, o)
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	return kubewatch.New(t, handler{s}, s.pub, s.opts.Watch).Run(ctx, cfg)
}

// Pods returns the names of the pods the source holds, sorted: everything its
// watch delivered, which its scoping (namespace and selector) makes only the EPP's.
func (s *Source) Pods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pods))
	for name := range s.pods {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// handler keeps the pods the watch delivers and publishes the set they make.
type handler struct{ s *Source }

func (h handler) Replace(objs []any) {
	pods := make(map[string]*corev1.Pod, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			pods[pod.Name] = pod
		}
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.pods, h.s.synced = pods, true
	h.s.publishLocked()
}

func (h handler) Upsert(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		h.s.pods[pod.Name] = pod
		h.s.publishLocked()
	}
}

func (h handler) Delete(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		delete(h.s.pods, pod.Name)
		h.s.publishLocked()
	}
}

// publishLocked publishes the set the pods make, once the first list is in, and
// whether it lists this replica (its peers apply the same rule to it).
func (s *Source) publishLocked() {
	if !s.synced {
		return
	}
	start := time.Now()
	pods := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		pods = append(pods, p)
	}
	set := Peers(pods, s.cfg)
	s.pub.ObserveRecompute(time.Since(start))
	s.pub.SetSelfListed(s.pub.Lists(set))
	s.pub.Publish(set)
}
