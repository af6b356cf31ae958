package main

import (
	"fmt"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/procmem"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// replicaMetrics are the figures the bench reads from a replica's /metrics (its
// metrics port, without authentication: eppreplica's flags), for the syncer and
// the shared index of the bench's configurations. Counters and histograms are
// totals since the replica started (sub gives those of a window).
type replicaMetrics struct {
	// sentBytes: epp_peer_sync_sent_bytes_total, state and broadcasts.
	sentBytes float64
	// placementBytes: epp_shared_prefix_placement_bytes, one observation per
	// placement published.
	placementBytes histogram
	// propagation: epp_shared_prefix_propagation_seconds, one observation per
	// peer's placement merged.
	propagation histogram
	// merged: epp_shared_prefix_placements_total by origin (local, peer).
	merged map[string]float64
	// dropped: epp_shared_prefix_dropped_total, every reason; notInPool: of
	// reason not-in-pool; droppedBy: by reason.
	dropped, notInPool float64
	droppedBy          map[string]float64
	// blocks: epp_shared_prefix_index_blocks.
	blocks float64
	// warm: epp_shared_prefix_warm (hasWarm: the replica has the shared index).
	warm    float64
	hasWarm bool
	// repairSent, repairReceived: epp_shared_prefix_repair_blocks_total by
	// direction (received: the blocks that changed this replica's index).
	repairSent, repairReceived float64
	// exchanges: epp_shared_prefix_exchanges_total by outcome, both roles.
	exchanges map[string]float64
	// shareAge: epp_fleet_metrics_share_age_seconds, one observation per peer's
	// share of a server's metrics applied (shared scraping): how old the metrics
	// the scorers read for the servers a peer scrapes were.
	shareAge histogram
}

// histogram is a Prometheus histogram: cumulative counts per upper bound.
type histogram struct {
	bounds     []float64 // upper bounds, increasing, +Inf last
	cumulative []float64
	count, sum float64
}

// add is h and o together (the same buckets, or either empty).
func (h histogram) add(o histogram) histogram {
	if len(h.bounds) == 0 {
		return o.scaled(1)
	}
	if len(o.bounds) == 0 {
		return h.scaled(1)
	}
	out := h.scaled(1)
	for i := range out.cumulative {
		out.cumulative[i] += o.cumulative[i]
	}
	out.count += o.count
	out.sum += o.sum
	return out
}

func (h histogram) scaled(f float64) histogram {
	out := histogram{bounds: slices.Clone(h.bounds), cumulative: slices.Clone(h.cumulative), count: f * h.count, sum: f * h.sum}
	for i := range out.cumulative {
		out.cumulative[i] *= f
	}
	return out
}

// quantile is the q-quantile as Prometheus's histogram_quantile estimates it
// (linear within the bucket it falls in; the highest finite bound when it falls
// in the +Inf bucket), and that bucket's upper bound; NaN when h is empty.
func (h histogram) quantile(q float64) (estimate, bucket float64) {
	if h.count <= 0 || len(h.bounds) == 0 {
		return math.NaN(), math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, ub := range h.bounds {
		if h.cumulative[i] >= rank {
			if math.IsInf(ub, 1) {
				return lower, ub
			}
			if h.cumulative[i] == below {
				return ub, ub
			}
			return lower + (ub-lower)*(rank-below)/(h.cumulative[i]-below), ub
		}
		lower, below = ub, h.cumulative[i]
	}
	return lower, math.Inf(1)
}

// mean is sum over count (NaN when empty).
func (h histogram) mean() float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// add is m and o together: counters and histograms summed (several replicas, or
// several windows); gauges are m's.
func (m replicaMetrics) add(o replicaMetrics) replicaMetrics {
	out := m
	out.sentBytes += o.sentBytes
	out.placementBytes = m.placementBytes.add(o.placementBytes)
	out.propagation = m.propagation.add(o.propagation)
	out.shareAge = m.shareAge.add(o.shareAge)
	out.merged, out.droppedBy = map[string]float64{}, map[string]float64{}
	for _, from := range []map[string]float64{m.merged, o.merged} {
		for k, v := range from {
			out.merged[k] += v
		}
	}
	for _, from := range []map[string]float64{m.droppedBy, o.droppedBy} {
		for k, v := range from {
			out.droppedBy[k] += v
		}
	}
	out.dropped += o.dropped
	out.notInPool += o.notInPool
	out.repairSent += o.repairSent
	out.repairReceived += o.repairReceived
	out.exchanges = map[string]float64{}
	for _, from := range []map[string]float64{m.exchanges, o.exchanges} {
		for k, v := range from {
			out.exchanges[k] += v
		}
	}
	return out
}

// sub is m less an earlier reading o of the same replica (counters and
// histograms; gauges are m's).
func (m replicaMetrics) sub(o replicaMetrics) replicaMetrics {
	neg := replicaMetrics{sentBytes: -o.sentBytes, placementBytes: o.placementBytes.scaled(-1), propagation: o.propagation.scaled(-1), shareAge: o.shareAge.scaled(-1),
		merged: map[string]float64{}, dropped: -o.dropped, notInPool: -o.notInPool, droppedBy: map[string]float64{},
		repairSent: -o.repairSent, repairReceived: -o.repairReceived, exchanges: map[string]float64{}}
	for k, v := range o.exchanges {
		neg.exchanges[k] = -v
	}
	for k, v := range o.merged {
		neg.merged[k] = -v
	}
	for k, v := range o.droppedBy {
		neg.droppedBy[k] = -v
	}
	return m.add(neg)
}

// scrapeMetrics reads the replica's /metrics at addr (127.0.0.1:port).
func scrapeMetrics(addr string) (replicaMetrics, error) {
	m := replicaMetrics{merged: map[string]float64{}, droppedBy: map[string]float64{}, exchanges: map[string]float64{}}
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return m, fmt.Errorf("GET %s/metrics: %w", addr, err)
	}
	for name, f := range families {
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			ours := labels[sharedprefix.Label] == sharedIndexPlugin
			switch {
			case name == "epp_peer_sync_sent_bytes_total":
				m.sentBytes += s.GetCounter().GetValue()
			case name == "epp_shared_prefix_warm" && ours:
				m.warm, m.hasWarm = s.GetGauge().GetValue(), true
			case name == "epp_shared_prefix_repair_blocks_total" && ours && labels["direction"] == "sent":
				m.repairSent += s.GetCounter().GetValue()
			case name == "epp_shared_prefix_repair_blocks_total" && ours && labels["direction"] == "received":
				m.repairReceived += s.GetCounter().GetValue()
			case name == "epp_shared_prefix_exchanges_total" && ours:
				m.exchanges[labels["outcome"]] += s.GetCounter().GetValue()
			case name == "epp_shared_prefix_placements_total" && ours:
				m.merged[labels["origin"]] += s.GetCounter().GetValue()
			case name == "epp_shared_prefix_dropped_total" && ours:
				m.dropped += s.GetCounter().GetValue()
				m.droppedBy[labels["reason"]] += s.GetCounter().GetValue()
				if labels["reason"] == "not-in-pool" {
					m.notInPool += s.GetCounter().GetValue()
				}
			case name == "epp_shared_prefix_index_blocks" && ours:
				m.blocks = s.GetGauge().GetValue()
			case name == "epp_shared_prefix_placement_bytes" && ours:
				m.placementBytes = histogramOf(s.GetHistogram())
			case name == "epp_shared_prefix_propagation_seconds" && ours:
				m.propagation = histogramOf(s.GetHistogram())
			case name == "epp_fleet_metrics_share_age_seconds":
				m.shareAge = m.shareAge.add(histogramOf(s.GetHistogram()))
			}
		}
	}
	return m, nil
}

// histogramOf is a scraped histogram, its +Inf bucket made explicit.
func histogramOf(hp *dto.Histogram) histogram {
	h := histogram{count: float64(hp.GetSampleCount()), sum: hp.GetSampleSum()}
	for _, b := range hp.GetBucket() {
		h.bounds = append(h.bounds, b.GetUpperBound())
		h.cumulative = append(h.cumulative, float64(b.GetCumulativeCount()))
	}
	if len(h.bounds) > 0 && !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
		h.bounds = append(h.bounds, math.Inf(1))
		h.cumulative = append(h.cumulative, h.count)
	}
	return h
}

// scrapeAll reads every replica's /metrics.
func scrapeAll(procs []*eppProc) ([]replicaMetrics, error) {
	out := make([]replicaMetrics, len(procs))
	for i, p := range procs {
		var err error
		if out[i], err = scrapeMetrics(p.Metrics); err != nil {
			return nil, fmt.Errorf("replica %s: %w", p.Pod, err)
		}
	}
	return out, nil
}

// memoryOf is each replica's resident memory now and at most so far
// (/proc/<pid>/status: VmRSS, VmHWM).
func memoryOf(procs []*eppProc) (rss, peak []int64, err error) {
	for _, p := range procs {
		u, err := procmem.Of(p.process.Pid())
		if err != nil {
			return nil, nil, fmt.Errorf("replica %s: %w", p.Pod, err)
		}
		rss = append(rss, u.RSS)
		peak = append(peak, u.Peak)
	}
	return rss, peak, nil
}

// reached is the peers' placements merged: live or resent after a gap.
func (m replicaMetrics) reached() float64 { return m.merged["peer"] }
