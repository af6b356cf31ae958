package fleetmetrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
)

// routedTo is the scheduling result of a request the primary profile sent to
// server id.
func routedTo(id string) *fwksched.SchedulingResult {
	ns, name, _ := strings.Cut(id, "/")
	ep := fwksched.NewEndpoint(&fwkdl.EndpointMetadata{ID: types.NamespacedName{Namespace: ns, Name: name}}, nil, nil)
	return &fwksched.SchedulingResult{PrimaryProfileName: "default",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"default": {TargetEndpoints: []fwksched.Endpoint{ep}}}}
}

// TestOwnRequestsCountUntilAReadingAfterThem: a request this replica routes to a
// server counts in its waiting queue at once; a reading taken before it (a peer's
// share on its way) keeps counting it, one taken after it does not (the server's
// own count holds it then). A request to a server the source does not poll
// changes nothing.
func TestOwnRequestsCountUntilAReadingAfterThem(t *testing.T) {
	p, ep, id, own, _ := receiver(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	t0 := time.Now()
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, t0, vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 3 {
		t.Fatalf("after the owner's share: waiting %d, want the page's 3", w)
	}
	time.Sleep(2 * time.Millisecond)
	for range 2 {
		if err := p.PreRequest(context.Background(), nil, routedTo(id)); err != nil {
			t.Fatal(err)
		}
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 5 {
		t.Errorf("after routing 2 requests to the server: waiting %d, want 3 + 2", w)
	}
	// A share read before the 2 requests (newer than the last): they still count.
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, t0.Add(time.Millisecond), vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 5 {
		t.Errorf("after a share read before the 2 requests: waiting %d, want 3 + 2 (the server had not seen them)", w)
	}
	// A share read after them: the server's own count holds them.
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, time.Now(), vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 3 {
		t.Errorf("after a share read after the 2 requests: waiting %d, want the page's 3", w)
	}
	for _, res := range []*fwksched.SchedulingResult{routedTo("llm/unknown-0"), nil, {PrimaryProfileName: "none"}} {
		if err := p.PreRequest(context.Background(), nil, res); err != nil {
			t.Fatal(err)
		}
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 3 {
		t.Errorf("after requests to no server this source polls: waiting %d, want 3", w)
	}
}

// TestRoutedRequestsAreBounded: between two readings a server remembers at most
// maxRouted of this replica's requests.
func TestRoutedRequestsAreBounded(t *testing.T) {
	p, _, id, _, _ := receiver(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	for range maxRouted + 10 {
		if err := p.PreRequest(context.Background(), nil, routedTo(id)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.servers[id].routed); n != maxRouted {
		t.Errorf("%d requests remembered, want at most %d", n, maxRouted)
	}
}

// TestRequestsRoutedWhileReadingsArriveCountOnce: requests routed while shares
// are applied each count once until a reading after them, and not after it.
func TestRequestsRoutedWhileReadingsArriveCountOnce(t *testing.T) {
	p, ep, id, own, _ := receiver(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			// Readings taken before every request below: each keeps counting them all.
			if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, start.Add(time.Duration(i+1)*time.Microsecond-time.Second), vllmPage)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 100 {
		if err := p.PreRequest(context.Background(), nil, routedTo(id)); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if w := ep.GetMetrics().WaitingQueueSize; w != 3+100 {
		t.Errorf("after 100 requests routed while older readings arrived: waiting %d, want 3 + 100 (each once)", w)
	}
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, time.Now(), vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if w := ep.GetMetrics().WaitingQueueSize; w != 3 {
		t.Errorf("after a reading taken after them: waiting %d, want the page's 3", w)
	}
}
