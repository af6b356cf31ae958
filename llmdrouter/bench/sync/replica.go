package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	crossplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/cross_plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// clock is what each replica publishes once per interval under clockKey, so that
// every other replica can time how long a value takes to become visible.
type clock struct {
	Replica int64
	Seq     int64
	At      int64 // unix ns, this machine's clock
}

const clockKey = "bench:clock"

// replicaMain is one EPP replica's data layer as the runtime drives it: the plugins
// built through upstream's registry and handle, the discovery started as the
// wiring starts it, Set for every endpoint once per interval with a fresh value
// (as the cross-replica publisher does), and Get of every endpoint's aggregate for
// each scheduling decision.
func replicaMain(args []string) error {
	fs := flag.NewFlagSet("replica", flag.ExitOnError)
	syncer := fs.String("syncer", "peer", "peer (peer-syncer) or local (upstream's LocalSyncer)")
	endpoints := fs.Int("endpoints", 100, "endpoints whose in-flight load is published")
	interval := fs.Duration("interval", 200*time.Millisecond, "crossReplicaSyncInterval")
	decisions := fs.Int("decisions", 20, "scheduling decisions per second, each reading every endpoint's aggregate")
	service := fs.String("service", "epp", "the EPP Service")
	syncAddr := fs.String("sync-address", "", "peer-sync address")
	httpAddr := fs.String("http-address", "", "where /metrics and /status are served")
	index := fs.Int64("index", 0, "this replica's index")
	change := fs.Float64("change", 1, "the share of endpoints whose value changes every interval (the others are set unchanged, as the runtime sets every endpoint)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	llmdrouter.Register()
	handle := fwkplugin.NewEppHandle(ctx, nil, fwkplugin.WithMetricsRecorder(ctrlmetrics.Registry))
	pdParams, _ := json.Marshal(map[string]string{"service": *service, "peerSyncAddress": *syncAddr})
	pd, err := fwkplugin.Registry[peerdiscovery.EndpointSliceType]("peer-discovery", json.NewDecoder(strings.NewReader(string(pdParams))), handle)
	if err != nil {
		return err
	}
	handle.AddPlugin("peer-discovery", pd)
	spec, err := inflightSpec(handle)
	if err != nil {
		return err
	}
	var s fwkdl.CrossReplicaSyncer
	switch *syncer {
	case "peer":
		p, err := fwkplugin.Registry[peersyncer.Type]("peer-syncer", json.NewDecoder(strings.NewReader(
			fmt.Sprintf(`{"peerDiscoveryRef": "peer-discovery", "interval": %q}`, interval.String()))), handle)
		if err != nil {
			return err
		}
		s = p.(fwkdl.CrossReplicaSyncer)
	case "local":
		p, err := crossplugin.LocalSyncerFactory("local-syncer", nil, handle)
		if err != nil {
			return err
		}
		s = p.(fwkdl.CrossReplicaSyncer)
	default:
		return fmt.Errorf("--syncer=%q: want peer or local", *syncer)
	}
	store := statesync.NewMemoryPeerStore()
	// Discovery ends early only on an error: the replica then stops with it, rather
	// than run on without peers and skew the bench.
	discoveryErr := make(chan error, 1)
	ctx, stopped := context.WithCancel(ctx)
	defer stopped()
	go func() {
		if err := pd.(fwkdl.PeerDiscovery).Start(ctx, fwkdl.NewPeerNotifier(store)); err != nil && ctx.Err() == nil {
			discoveryErr <- fmt.Errorf("peer discovery stopped: %w", err)
			stopped()
		}
	}()

	eps := endpointNames(*endpoints)
	lat := &latencies{seen: map[int64]int64{}}
	set := func(k, ep string, v any) { _ = s.Set(ctx, fwkdl.StateKey(k), ep, v) }
	go publish(ctx, set, string(spec.StateKey), eps, *interval, *index, *change)
	go schedule(ctx, s, spec, eps, *decisions)
	// Both syncers get the same watcher, so that it costs them the same (with
	// LocalSyncer it only ever sees this replica's own clock).
	go watchClocks(ctx, s, lat, *index)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile) // to see where a replica's CPU goes
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		st := status{Ready: isReady(pd), Peers: len(store.Peers())}
		if p, ok := s.(*peersyncer.Plugin); ok {
			doc := p.Syncer().Document("none", "")
			for _, ps := range doc.Peers {
				if ps.InSync {
					st.InSync++
				}
			}
		}
		if r.URL.Query().Get("reset") == "1" {
			st.Latencies = lat.take()
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := &http.Server{Addr: *httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return err
	}
	select {
	case err := <-discoveryErr:
		return err
	default:
		return nil
	}
}

type status struct {
	Ready     bool    `json:"ready"`
	Peers     int     `json:"peers"`
	InSync    int     `json:"inSync"`
	Latencies []int64 `json:"latencies,omitempty"` // ns, since the last reset
}

func isReady(pd fwkplugin.Plugin) bool {
	select {
	case <-pd.(fwkdl.PeerDiscovery).Ready():
		return true
	default:
		return false
	}
}

// publish is what the cross-replica publisher does, for the bench: every interval,
// set (through set) each endpoint's load of that tick, of which the first change
// share is new every tick (see load), and this replica's clock.
func publish(ctx context.Context, set func(key, endpoint string, value any), key string, eps []string, interval time.Duration, index int64, change float64) {
	changing := int(change * float64(len(eps)))
	t := time.NewTicker(interval)
	defer t.Stop()
	for tick := int64(0); ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, ep := range eps {
			set(key, ep, load(tick, i, changing))
		}
		set(clockKey, "clock", &clock{Replica: index, Seq: tick, At: time.Now().UnixNano()})
	}
}

// inflightSpec is the cross-replica state of llm-d-router's in-flight load
// producer, built with handle: what every replica of the bench publishes.
func inflightSpec(handle fwkplugin.Handle) (fwkdl.CrossReplicaSpec, error) {
	producer, err := inflightload.InFlightLoadProducerFactory("inflight", nil, handle)
	if err != nil {
		return fwkdl.CrossReplicaSpec{}, err
	}
	return producer.(fwkdl.CrossReplicaContributor).CrossReplicaState(), nil
}

// endpointNames are the bench's n endpoints.
func endpointNames(n int) []string {
	eps := make([]string, n)
	for i := range eps {
		eps[i] = fmt.Sprintf("llm/vllm-%04d", i)
	}
	return eps
}

// load is endpoint i's value at tick: a new one each tick for the first changing
// endpoints, the same one for the others.
func load(tick int64, i, changing int) *attrconcurrency.InFlightLoad {
	if i >= changing {
		tick = 0
	}
	return &attrconcurrency.InFlightLoad{Requests: (tick + int64(i)) % 7, Tokens: (tick*31 + int64(i)) % 4096}
}

// schedule reads every endpoint's aggregate, decisions times a second, as the
// scorers do on each request.
func schedule(ctx context.Context, s fwkdl.CrossReplicaSyncer, spec fwkdl.CrossReplicaSpec, eps []string, decisions int) {
	if decisions <= 0 {
		return
	}
	t := time.NewTicker(time.Second / time.Duration(decisions))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, ep := range eps {
			_, _, _ = s.Get(ctx, spec.StateKey, ep, spec.Aggregate)
		}
	}
}

type latencies struct {
	mu   sync.Mutex
	seen map[int64]int64 // replica -> last seq seen
	all  []int64
}

func (l *latencies) take() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.all)
	l.all = l.all[:0]
	return out
}

// watchClocks reads the other replicas' clocks every 5 ms: a clock value seen for
// the first time took now - At (less up to 5 ms) to become visible here.
func watchClocks(ctx context.Context, s fwkdl.CrossReplicaSyncer, l *latencies, index int64) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	collect := func(vs []any) any { return slices.Clone(vs) }
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, ok, _ := s.Get(ctx, clockKey, "clock", collect)
		if !ok {
			continue
		}
		now := time.Now().UnixNano()
		vs, ok := v.([]any)
		if !ok {
			vs = []any{v} // LocalSyncer returns its one value, not the aggregate
		}
		l.mu.Lock()
		for _, x := range vs {
			c, ok := x.(*clock)
			if !ok || c.Replica == index {
				continue
			}
			if last, ok := l.seen[c.Replica]; !ok || c.Seq > last {
				if ok { // the first value seen of a replica may be old: not timed
					l.all = append(l.all, now-c.At)
				}
				l.seen[c.Replica] = c.Seq
			}
		}
		l.mu.Unlock()
	}
}
