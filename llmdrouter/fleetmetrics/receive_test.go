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
// upstream's extractor and one server it polls as a peer's.
func receiver(t *testing.T, name string) (*Plugin, fwkdl.Endpoint) {
	t.Helper()
	keep := map[string]bool{}
	for _, f := range DefaultFamilies {
		keep[f] = true
	}
	p := &Plugin{typedName: fwkplugin.TypedName{Type: Type, Name: name}, self: "ns/epp-0", ttl: DefaultOwnerTTL, keep: keep,
		m: metricsFor(name), servers: map[string]*server{}, heard: liveness{}}
	ext, err := extractormetrics.CoreMetricsExtractorFactory("core-metrics-extractor", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendExtractor(ext); err != nil {
		t.Fatal(err)
	}
	ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{ID: types.NamespacedName{Namespace: "llm", Name: "vllm-0-rank-0"}}, nil)
	p.servers["llm/vllm-0-rank-0"] = &server{ep: ep, lastMode: modePeer}
	return p, ep
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

// TestSharesAreAppliedOnceAndLiesRefused: a peer's share of a server this replica
// polls as a peer's is fed to the extractors; an older one, one of a server it does
// not know, or one it scrapes itself, is counted and left; one from more than
// maxAhead in the future, or that does not parse, is refused with its reason (the
// connection is closed by peer-sync and counted). A message taken counts its
// sender as live; a refused one does not.
func TestSharesAreAppliedOnceAndLiesRefused(t *testing.T) {
	p, ep := receiver(t, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())) // its own series under -count
	now := time.Now()
	outcome := func(o string) float64 { return testutil.ToFloat64(p.m.shares.WithLabelValues(o)) }
	if err := p.receive(peersync.Message{Peer: "ns/epp-1", Data: shareMessage(t, "llm/vllm-0-rank-0", now, vllmPage)}); err != nil {
		t.Fatal(err)
	}
	if m := ep.GetMetrics(); m.WaitingQueueSize != 3 || m.RunningRequestsSize != 7 || outcome(shareApplied) != 1 {
		t.Fatalf("after a share: waiting %d, running %d, %v applied; want 3, 7, 1", m.WaitingQueueSize, m.RunningRequestsSize, outcome(shareApplied))
	}
	older := strings.Replace(vllmPage, "} 3.0", "} 9.0", 1)
	if err := p.receive(peersync.Message{Peer: "ns/epp-2", Data: shareMessage(t, "llm/vllm-0-rank-0", now.Add(-time.Millisecond), older)}); err != nil {
		t.Fatal(err)
	}
	if ep.GetMetrics().WaitingQueueSize != 3 || outcome(shareOlder) != 1 {
		t.Errorf("an older share changed the metrics (waiting %d) or was not counted", ep.GetMetrics().WaitingQueueSize)
	}
	if err := p.receive(peersync.Message{Peer: "ns/epp-1", Data: shareMessage(t, "llm/other", now, vllmPage)}); err != nil || outcome(shareUnknown) != 1 {
		t.Errorf("a share of an unknown server: %v, counted %v", err, outcome(shareUnknown))
	}
	p.servers["llm/vllm-0-rank-0"].lastMode = modeOwned
	if err := p.receive(peersync.Message{Peer: "ns/epp-1", Data: shareMessage(t, "llm/vllm-0-rank-0", now.Add(time.Millisecond), older)}); err != nil || outcome(shareOwned) != 1 || ep.GetMetrics().WaitingQueueSize != 3 {
		t.Errorf("a share of a server this replica owns: %v, counted %v, waiting %d", err, outcome(shareOwned), ep.GetMetrics().WaitingQueueSize)
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
