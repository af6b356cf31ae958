package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubeconfig"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubewatch"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Options tune the source. The zero value is the default.
type Options struct {
	// Instance names the discovery in its metrics (Discovery only; the binary's
	// source is named after the source). Without it, New gives the discovery a
	// name of its own.
	Instance string
	// RESTConfig reaches the API server. Without it, Run loads one with
	// kubeconfig.Load (in-cluster, or a kubeconfig); SetupWithManager takes the
	// manager's.
	RESTConfig *rest.Config
	// loadConfig, if set, loads the configuration instead of kubeconfig.Load (the
	// program's loader, from discovery.Deps).
	loadConfig func() (*rest.Config, error)
	// ProbeInterval is how often a synced source checks the API server (jittered by
	// ±20%); 4 s by default. ProbeTimeout bounds one check; 2.5 s by default. So a
	// lost API server shows within 7.3 s.
	ProbeInterval, ProbeTimeout time.Duration
	// StaleProbeInterval is how often a stale source checks whether the API server is
	// back (jittered by ±50%); 1 s by default.
	StaleProbeInterval time.Duration
}

// Source is the EndpointSlice peer source. It keeps the peer set of one Service's
// slices incrementally (peerset.State): every slice event updates that slice's
// peers and publishes only the change. The slices come from a reflector of its own,
// scoped to the namespace and the service-name label, and a health check watches
// over the connection to the API server (kubewatch).
type Source struct {
	cfg  peerset.Config
	pub  *discovery.Publisher
	log  logr.Logger
	opts Options
	now  func() time.Time

	setUp bool // SetupWithManager was called

	mu     sync.Mutex // guards the fields below
	state  *peerset.State
	names  map[string]bool // namespace/name of every slice the feed delivered
	synced bool
}

var _ discovery.Source = (*Source)(nil)

// NewSource returns the source for cfg, publishing through pub.
func NewSource(cfg peerset.Config, pub *discovery.Publisher, log logr.Logger, opts Options) *Source {
	return &Source{cfg: cfg, pub: pub, log: log, opts: opts, now: time.Now,
		state: peerset.NewState(cfg), names: map[string]bool{}}
}

// Slices returns namespace/name of every slice the source holds: everything its
// feed delivered, which its scoping (namespace and label) makes only the Service's.
func (s *Source) Slices() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.names))
	for n := range s.names {
		out = append(out, n)
	}
	return out
}

// SetupWithManager joins a host's controller-runtime manager, an optional extra for a
// host that has one (Run alone needs nothing from the host): the source runs as one
// of its runnables, on every replica, leader or not, apart from the manager's
// cache-sync wait (so that nothing of the host holds it up), with the manager's
// client configuration and a reflector of its own; Run only waits.
func (s *Source) SetupWithManager(mgr manager.Manager) error {
	if s.setUp {
		return errors.New("endpointslice peer discovery: SetupWithManager called twice")
	}
	s.setUp = true
	if s.opts.RESTConfig == nil {
		s.opts.RESTConfig = mgr.GetConfig()
	}
	return mgr.Add(runnable{s: s, cache: mgr.GetCache()})
}

// runnable runs the source in a manager on every replica. It starts with the
// manager's caches, not after they synced (which controller-runtime waits for
// before its other runnables), so that a host cache that cannot sync never holds
// up peer discovery. It declares the manager's cache as its own for that, with a
// sync wait that does not wait.
type runnable struct {
	s     *Source
	cache cache.Cache
}

func (r runnable) Start(ctx context.Context) error { return r.s.watch(ctx) }
func (runnable) NeedLeaderElection() bool          { return false }
func (r runnable) GetCache() cache.Cache           { return noSyncWait{r.cache} }

// noSyncWait is a cache whose sync the manager does not wait for.
type noSyncWait struct{ cache.Cache }

func (noSyncWait) WaitForCacheSync(context.Context) bool { return true }

// Run runs the source until ctx ends. Under a manager (SetupWithManager) the manager
// runs it, and Run only waits.
func (s *Source) Run(ctx context.Context) error {
	if s.setUp {
		<-ctx.Done()
		return nil
	}
	if s.opts.RESTConfig == nil {
		load := s.opts.loadConfig
		if load == nil {
			load = func() (*rest.Config, error) { return kubeconfig.Load("") }
		}
		c, err := load()
		if err != nil {
			return fmt.Errorf("endpointslice peer discovery: %w", err)
		}
		s.opts.RESTConfig = c
	}
	return s.watch(ctx)
}

// watch keeps the Service's slices with a reflector of its own and watches over its
// connection to the API server (kubewatch), until ctx ends.
func (s *Source) watch(ctx context.Context) error {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.cfg.Service}).String()
	t := kubewatch.Target{Group: discoveryv1.GroupName, Resource: "endpointslices", Namespace: s.cfg.Namespace, Selector: sel,
		Object: &discoveryv1.EndpointSlice{},
		List: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.DiscoveryV1().EndpointSlices(s.cfg.Namespace).List(ctx, o)
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.DiscoveryV1().EndpointSlices(s.cfg.Namespace).Watch(ctx, o)
		},
	}
	w := kubewatch.New(t, handler{s}, s.pub, kubewatch.Options{ProbeInterval: s.opts.ProbeInterval,
		ProbeTimeout: s.opts.ProbeTimeout, StaleProbeInterval: s.opts.StaleProbeInterval})
	return w.Run(ctx, s.opts.RESTConfig)
}

// handler applies what the watch delivers to the source's state.
type handler struct{ s *Source }

func (h handler) Upsert(obj any) {
	if sl, ok := sliceOf(obj); ok {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		h.s.upsertLocked(sl)
	}
}

func (h handler) Delete(obj any) {
	if sl, ok := sliceOf(obj); ok {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		h.s.deleteLocked(sl)
	}
}

func (h handler) Replace(list []any) {
	all := make([]discoveryv1.EndpointSlice, 0, len(list))
	for _, o := range list {
		if sl, ok := sliceOf(o); ok {
			all = append(all, *sl)
		}
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.replaceLocked(all)
	h.s.markSyncedLocked()
}

// applyLocked applies one slice event (or a re-list) to the state and publishes its
// change once the source has synced. Callers hold s.mu.
func (s *Source) applyLocked(update func() peers.Change, trigger time.Time) {
	start := s.now()
	change := update()
	s.pub.ObserveRecompute(s.now().Sub(start))
	if !s.synced {
		return
	}
	s.pub.SetSelfListed(s.state.SelfListed())
	s.pub.PublishChange(change, s.state.Len())
	m := s.pub.Metrics()
	m.EndpointSlices.Set(float64(len(s.names)))
	if !trigger.IsZero() && !change.Empty() {
		m.PropagationDelay.Observe(s.now().Sub(trigger).Seconds())
	}
}

// markSyncedLocked publishes the whole set as the first one.
func (s *Source) markSyncedLocked() {
	if s.synced {
		return
	}
	s.synced = true
	all := s.state.Peers()
	s.pub.SetSelfListed(s.state.SelfListed())
	s.pub.PublishChange(peers.Change{Upserts: all}, len(all))
	s.pub.Metrics().EndpointSlices.Set(float64(len(s.names)))
}

// triggerTime is the slice's endpoints.kubernetes.io/last-change-trigger-time: when
// the change that made the EndpointSlice controller update it happened.
func triggerTime(sl *discoveryv1.EndpointSlice) time.Time {
	v, ok := sl.Annotations[corev1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// upsertLocked, deleteLocked and replaceLocked apply the reflector's events.
func (s *Source) upsertLocked(sl *discoveryv1.EndpointSlice) {
	s.names[sl.Namespace+"/"+sl.Name] = true
	s.applyLocked(func() peers.Change { return s.state.Upsert(sl) }, triggerTime(sl))
}

func (s *Source) deleteLocked(sl *discoveryv1.EndpointSlice) {
	delete(s.names, sl.Namespace+"/"+sl.Name)
	s.applyLocked(func() peers.Change { return s.state.Delete(sl.Name) }, time.Time{})
}

func (s *Source) replaceLocked(all []discoveryv1.EndpointSlice) {
	s.names = make(map[string]bool, len(all))
	for i := range all {
		s.names[all[i].Namespace+"/"+all[i].Name] = true
	}
	s.applyLocked(func() peers.Change { return s.state.Replace(all) }, time.Time{})
}

// sliceOf unwraps what a reflector hands over.
func sliceOf(obj any) (*discoveryv1.EndpointSlice, bool) {
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		return o, true
	case toolscache.DeletedFinalStateUnknown:
		sl, ok := o.Obj.(*discoveryv1.EndpointSlice)
		return sl, ok
	}
	return nil, false
}
