package fleetmetrics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	extractormetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/extractor/metrics"
)

// receiver is a source that takes messages (no syncer: receive alone), with
// upstream's extractor, peers ns/epp-1 and ns/epp-2 heard from, and one server it
// polls as a peer's; it returns the server's ID, its owner and the other peer.
func receiver(t *testing.T, name string) (p *Plugin, ep fwkdl.Endpoint, id, own, other string) {
	t.Helper()
	keep := map[string]bool{}
	for _, f := range DefaultFamilies {
		keep[f] = true
	}
	p = &Plugin{typedName: fwkplugin.TypedName{Type: Type, Name: name}, self: "ns/epp-0", ttl: DefaultOwnerTTL, keep: keep,
		m: metricsFor(name), servers: map[string]*server{}, heard: liveness{"ns/epp-1": time.Now(), "ns/epp-2": time.Now()}}
	ext, err := extractormetrics.CoreMetricsExtractorFactory("core-metrics-extractor", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendExtractor(ext); err != nil {
		t.Fatal(err)
	}
	members := p.heard.members(p.self, time.Now(), p.ttl)
	for i := 0; own == "" || own == p.self; i++ { // a server a peer owns
		id = fmt.Sprintf("llm/vllm-%d-rank-0", i)
		own = owner(id, members)
	}
	other = "ns/epp-1"
	if own == other {
		other = "ns/epp-2"
	}
	nn := strings.SplitN(id, "/", 2)
	ep = fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{ID: types.NamespacedName{Namespace: nn[0], Name: nn[1]}}, nil)
	p.servers[id] = &server{ep: ep, lastMode: modePeer}
	return p, ep, id, own, other
}

func shareMessage(t *testing.T, server string, at time.Time, page string) []byte {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := encodeShare(share{server: server, scrapedAt: at, families: fams})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestSharesAreAppliedOnceAndLiesRefused: the owner's share of a server this
// replica polls as a peer's is fed to the extractors; a share from a peer that
// does not own the server, however new it says it is, an older one from the
// owner, one of a server this replica does not know, or of one it scrapes itself,
// is counted and left; one from more than maxAhead in the future, or that does
// not parse, is refused with its reason (the connection is closed by peer-sync and
// counted). A message taken counts its sender as live; a refused one does not.
func TestSharesAreAppliedOnceAndLiesRefused(t *testing.T) {
	p, ep, id, own, other := receiver(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())) // its own series under -count
	now := time.Now()
	outcome := func(o string) float64 { return testutil.ToFloat64(p.m.shares.WithLabelValues(o)) }
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, now, vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if m := ep.GetMetrics(); m.WaitingQueueSize != 3 || m.RunningRequestsSize != 7 || outcome(shareApplied) != 1 {
		t.Fatalf("after the owner's share: waiting %d, running %d, %v applied; want 3, 7, 1", m.WaitingQueueSize, m.RunningRequestsSize, outcome(shareApplied))
	}
	lie := strings.Replace(vllmPage, "} 3.0", "} 9.0", 1)
	if err := p.receive(peersync.Message{Peer: other, Data: shareMessage(t, id, now.Add(time.Second), lie)}); err != nil {
		t.Fatal(err)
	}
	if ep.GetMetrics().WaitingQueueSize != 3 || outcome(shareNotOwner) != 1 {
		t.Errorf("a newer share from %s, which does not own %s, changed the metrics (waiting %d) or was not counted", other, id, ep.GetMetrics().WaitingQueueSize)
	}
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, now.Add(-time.Millisecond), lie)}); err != nil {
		t.Fatal(err)
	}
	if ep.GetMetrics().WaitingQueueSize != 3 || outcome(shareOlder) != 1 {
		t.Errorf("an older share of the owner changed the metrics (waiting %d) or was not counted", ep.GetMetrics().WaitingQueueSize)
	}
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, "llm/other", now, vllmPage)}); err != nil || outcome(shareUnknown) != 1 {
		t.Errorf("a share of an unknown server: %v, counted %v", err, outcome(shareUnknown))
	}
	p.servers[id].lastMode = modeOwned
	if err := p.receive(peersync.Message{Peer: own, Data: shareMessage(t, id, now.Add(time.Millisecond), lie)}); err != nil || outcome(shareOwned) != 1 || ep.GetMetrics().WaitingQueueSize != 3 {
		t.Errorf("a share of a server this replica scrapes: %v, counted %v, waiting %d", err, outcome(shareOwned), ep.GetMetrics().WaitingQueueSize)
	}
	for name, msg := range map[string][]byte{
		"the future":   shareMessage(t, "llm/vllm-0-rank-0", now.Add(maxAhead+time.Second), vllmPage),
		"garbage":      {kindShare, 200, 1, 2},
		"unknown kind": {9, 0, 0, 0},
		"empty":        {},
	} {
		err := p.receive(peersync.Message{Peer: "ns/epp-3", Data: msg})
		var rej *peersync.RejectError
		if !errors.As(err, &rej) || (rej.Reason != "malformed-share" && rej.Reason != "share-from-the-future") {
			t.Errorf("%s: %v, want a refusal with its reason", name, err)
		}
	}
	if err := p.receive(peersync.Message{Peer: "ns/epp-4", Data: heartbeatMessage}); err != nil {
		t.Fatal(err)
	}
	if got := p.heard.members(p.self, time.Now(), p.ttl); !slices.Equal(got, []string{"ns/epp-0", "ns/epp-1", "ns/epp-2", "ns/epp-4"}) {
		t.Errorf("members %v: want every sender of a message taken (not ns/epp-3, refused)", got)
	}
}
