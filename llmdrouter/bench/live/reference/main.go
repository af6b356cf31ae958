// Command reference is the yardstick of `make bench-live`: peer discovery written
// the plain way, as most code in this field does it. A client-go informer watches
// the Service's EndpointSlices (scoped like epp's: the namespace and the
// kubernetes.io/service-name label), and every event recomputes the whole peer set
// from the informer's store with peerset.Compute (the same rules as epp, so both
// give the same set). GET /debug/peers encodes the current set on every request;
// /readyz answers 200 once the informer has synced and the set was computed.
//
// It is a benchmark helper, not a product: no staleness, no metrics, no snapshot.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Path to a kubeconfig.")
	namespace := flag.String("namespace", "", "Namespace of the Service.")
	service := flag.String("service", "epp", "Name of the Service.")
	addr := flag.String("addr", "127.0.0.1:0", "Address serving /debug/peers and /readyz.")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *service, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, service, addr string) error {
	if namespace == "" {
		return fmt.Errorf("--namespace is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig=%s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + service
		}))
	slices := factory.Discovery().V1().EndpointSlices()
	rules := peerset.Config{Namespace: namespace, Service: service, PortName: "peer-sync", DefaultPort: 9005}

	var (
		mu      sync.Mutex
		current = []peers.PeerMetadata{}
		synced  atomic.Bool
	)
	recompute := func() {
		objs, err := slices.Lister().EndpointSlices(namespace).List(labels.Everything())
		if err != nil {
			return
		}
		in := make([]discoveryv1.EndpointSlice, len(objs))
		for i, o := range objs {
			in[i] = *o
		}
		set := peerset.Compute(rules, in)
		mu.Lock()
		current = set
		mu.Unlock()
	}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { recompute() },
		UpdateFunc: func(any, any) { recompute() },
		DeleteFunc: func(any) { recompute() },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/peers", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		set := current
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(peers.Document{Enabled: true, Source: peers.SourceEndpointSlice, Peers: peers.Entries(set)})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, "reference:", err)
			os.Exit(1)
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), slices.Informer().HasSynced) {
		return nil
	}
	recompute()
	synced.Store(true)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
