package fleetmetrics

import (
	"context"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"
)

// A replica's own requests since a reading: with shared scraping every replica's
// view of a server changes at once, to the same values, and between two readings
// they would all send to the server that looks least loaded (DECISIONS: "Scraping
// once per fleet", herding). Each replica knows one part of that pile, its own: a
// request it routes to a server counts in the server's waiting queue
// (WaitingQueueSize, what queue-scorer reads) until a reading taken after it, whose
// waiting queue holds it if it still waits.

// maxRouted bounds the requests remembered per server between two readings: more
// than a server takes in any interval; beyond it the oldest are forgotten (and
// counted no more).
const maxRouted = 1024

// PreRequest implements llm-d-router's requestcontrol.PreRequest (the runner calls
// every plugin that implements it): the request's server, the primary profile's
// first target, counts it in its waiting queue until the next reading.
func (p *Plugin) PreRequest(_ context.Context, _ *fwksched.InferenceRequest, res *fwksched.SchedulingResult) error {
	id, ok := primaryTarget(res)
	if !ok {
		return nil
	}
	p.mu.Lock()
	s := p.servers[id]
	var ep fwkdl.Endpoint
	if s != nil {
		ep = s.ep
	}
	p.mu.Unlock()
	if s == nil || ep == nil {
		return nil // not a server of the pool this source polls
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if len(s.routed) == maxRouted {
		s.routed = append(s.routed[:0], s.routed[1:]...)
	}
	s.routed = append(s.routed, time.Now())
	addWaiting(ep, 1)
	return nil
}

// primaryTarget is the ID of the server the primary profile picked first.
func primaryTarget(res *fwksched.SchedulingResult) (string, bool) {
	if res == nil {
		return "", false
	}
	pr := res.ProfileResults[res.PrimaryProfileName]
	if pr == nil || len(pr.TargetEndpoints) == 0 || pr.TargetEndpoints[0] == nil {
		return "", false
	}
	md := pr.TargetEndpoints[0].GetMetadata()
	if md == nil {
		return "", false
	}
	return md.ID.String(), true
}

// applyReading feeds a reading of server id (its own scrape or a peer's share),
// taken at at, to the extractors, then counts in its waiting queue this replica's
// requests routed to it since at (by the two clocks, as the share's age is). A
// request routed meanwhile counts once: the two hold the server's applyMu.
func (p *Plugin) applyReading(ctx context.Context, id string, ep fwkdl.Endpoint, at time.Time, fams sourcemetrics.PrometheusMetricMap) {
	p.mu.Lock()
	s := p.servers[id]
	p.mu.Unlock()
	if s == nil {
		p.extract(ctx, ep, fams)
		return
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	p.extract(ctx, ep, fams)
	kept := s.routed[:0]
	for _, t := range s.routed {
		if t.After(at) {
			kept = append(kept, t)
		}
	}
	s.routed = kept
	addWaiting(ep, len(kept))
}

// addWaiting adds n requests to ep's waiting queue (a copy of its metrics, as
// the extractors write them).
func addWaiting(ep fwkdl.Endpoint, n int) {
	if n == 0 {
		return
	}
	m := ep.GetMetrics()
	if m == nil {
		return
	}
	c := m.Clone()
	c.WaitingQueueSize += n
	ep.UpdateMetrics(c)
}
