package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// service is the Service whose slices both implementations watch.
type service struct {
	ns     string
	slices []*discoveryv1.EndpointSlice
	events int    // endpoints added so far, for unique names
	last   change // the newest change
}

// createService creates n ready endpoints in slices of 100 (the way the
// EndpointSlice controller packs them) in a new namespace.
func (b *bench) createService(ctx context.Context, prefix string, n int) (*service, error) {
	ns, err := b.env.CreateNamespace(ctx, prefix, nil)
	if err != nil {
		return nil, err
	}
	s := &service{ns: ns}
	for start := 0; start < n; start += 100 {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("epp-%05d", start/100), Labels: map[string]string{discoveryv1.LabelServiceName: "epp"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("peer-sync"), Port: ptr.To[int32](9005), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		for i := start; i < min(start+100, n); i++ {
			sl.Endpoints = append(sl.Endpoints, endpoint(ns, fmt.Sprintf("peer-%05d", i), i))
		}
		s.slices = append(s.slices, sl)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range s.slices {
		g.Go(func() error {
			created, err := b.env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(gctx, s.slices[i], metav1.CreateOptions{})
			if err == nil {
				s.slices[i] = created
			}
			return err
		})
	}
	return s, g.Wait()
}

// endpoint is a ready endpoint of pod name with the i-th address of 10.0.0.0/8.
func endpoint(ns, name string, i int) discoveryv1.Endpoint {
	ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String()
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name},
	}
}

// change is one single-endpoint change: an endpoint added to a slice, or that
// endpoint removed again. marker is what /debug/peers shows while it is there.
type change struct {
	slice   int
	marker  []byte
	present bool
	rv      string // the slice's resourceVersion after the write
}

// step makes the next single-endpoint change: it adds a new endpoint to one slice
// (taking the slices in turn), or removes the endpoint it added last.
func (s *service) step(ctx context.Context, b *bench) (change, error) {
	var c change
	if s.last.present {
		sl := s.slices[s.last.slice].DeepCopy()
		sl.Endpoints = sl.Endpoints[:len(sl.Endpoints)-1]
		c = change{slice: s.last.slice, marker: s.last.marker, present: false}
		updated, err := b.env.Clientset.DiscoveryV1().EndpointSlices(s.ns).Update(ctx, sl, metav1.UpdateOptions{})
		if err != nil {
			return change{}, err
		}
		s.slices[c.slice] = updated
		c.rv = updated.ResourceVersion
	} else {
		s.events++
		name := fmt.Sprintf("ev-%06d", s.events)
		c = change{slice: s.events % len(s.slices), marker: []byte(strconv.Quote(name)), present: true}
		sl := s.slices[c.slice].DeepCopy()
		sl.Endpoints = append(sl.Endpoints, endpoint(s.ns, name, 0xfa0000+s.events))
		updated, err := b.env.Clientset.DiscoveryV1().EndpointSlices(s.ns).Update(ctx, sl, metav1.UpdateOptions{})
		if err != nil {
			return change{}, err
		}
		s.slices[c.slice] = updated
		c.rv = updated.ResourceVersion
	}
	s.last = c
	return c, nil
}

// settle removes an endpoint that step added last and waits until p shows that.
func (s *service) settle(ctx context.Context, b *bench, p *proc) error {
	if !s.last.present {
		return nil
	}
	c, err := s.step(ctx, b)
	if err != nil {
		return err
	}
	_, err = p.waitFor(c.marker, c.present, eventTimeout)
	return err
}

// unrelated creates n slices of other Services in ns (10 endpoints each).
func (b *bench) createUnrelated(ctx context.Context, ns string, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("other-%05d", i), Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("other-%d", i/2)}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			}
			for j := range 10 {
				sl.Endpoints = append(sl.Endpoints, endpoint(ns, fmt.Sprintf("other-%05d-%d", i, j), 0x800000+i*10+j))
			}
			_, err := b.env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(gctx, sl, metav1.CreateOptions{})
			return err
		})
	}
	return g.Wait()
}

// deleteUnrelated removes what unrelated created.
func (b *bench) deleteUnrelated(ctx context.Context, ns string) error {
	return b.env.Clientset.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "!=epp"})
}

// readRequests is the API server's own count of non-watch reads of EndpointSlices
// (LIST and GET in apiserver_request_total): what a replica costs the API server
// besides its watch. The bench's writes are UPDATEs and CREATEs, not counted.
func (b *bench) readRequests(ctx context.Context) (float64, error) {
	raw, err := b.env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="endpointslices"`) {
			continue
		}
		if !strings.Contains(line, `verb="LIST"`) && !strings.Contains(line, `verb="GET"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("apiserver_request_total: %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// deliveries records when a bare watch of the Service's slices, in this process,
// receives each write: the API server's own part of the latency, measured in the
// same run as the replica's.
type deliveries struct {
	mu sync.Mutex
	at map[string]time.Time // by resourceVersion
}

// watchDeliveries watches the Service's slices in ns until ctx ends.
func (b *bench) watchDeliveries(ctx context.Context, ns string) (*deliveries, error) {
	w, err := b.env.Clientset.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=epp"})
	if err != nil {
		return nil, fmt.Errorf("watching the slices: %w", err)
	}
	d := &deliveries{at: map[string]time.Time{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			now := time.Now()
			if sl, ok := ev.Object.(*discoveryv1.EndpointSlice); ok {
				d.mu.Lock()
				d.at[sl.ResourceVersion] = now
				d.mu.Unlock()
			}
		}
	}()
	return d, nil
}

// arrival is when the write that produced rv reached the bare watch (waiting up to
// 5 s for it).
func (d *deliveries) arrival(rv string) (time.Time, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d.mu.Lock()
		t, ok := d.at[rv]
		d.mu.Unlock()
		if ok {
			return t, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the bare watch did not receive resourceVersion %s within 5s", rv)
		}
	}
}
