package peersync

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// TestMetricsOfAnExchange: what an operator reads off two replicas that sync: the
// peers and the peers in sync, a push duration observed for every message written,
// the bytes received from a peer matching the bytes it wrote (a frame's length prefix
// aside), and both gauges back to 0 once discovery removes the peer.
func TestMetricsOfAnExchange(t *testing.T) {
	rs := newCluster(t, 2)
	a, b := rs[0], rs[1]
	const key, ep = "inflight:p", "ns/vllm-0"
	for i, r := range rs {
		if err := r.s.Set(key, ep, &load{Requests: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSum(t, 5*time.Second, rs, key, ep, 3)
	gauge := func(g *prometheus.GaugeVec, r *replica) float64 {
		return testutil.ToFloat64(g.WithLabelValues(r.instance))
	}
	wait.For(t, 5*time.Second, func() string {
		if gauge(peersGauge, a) == 1 && gauge(inSync, a) == 1 && gauge(peersGauge, b) == 1 && gauge(inSync, b) == 1 {
			return ""
		}
		return "epp_peer_sync_peers and _peers_in_sync: want 1 and 1 on both replicas"
	})

	// A window of heartbeats (nothing changes): A's pushes, as B receives them.
	counter := func(c *prometheus.CounterVec, r *replica) float64 {
		return testutil.ToFloat64(c.WithLabelValues(r.instance))
	}
	pushes := func(r *replica) uint64 {
		var m dto.Metric
		if err := pushSeconds.WithLabelValues(r.instance).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	sent0, sentMsgs0, push0 := counter(sentBytes, a), counter(sentMessages, a), pushes(a)
	got0, gotMsgs0 := counter(receivedBytes, b), counter(receivedMessages, b)
	wait.For(t, 5*time.Second, func() string {
		if n := counter(sentMessages, a) - sentMsgs0; n < 10 {
			return fmt.Sprintf("A wrote %v heartbeats, want 10", n)
		}
		return ""
	})
	sent, sentMsgs, pushed := counter(sentBytes, a)-sent0, counter(sentMessages, a)-sentMsgs0, pushes(a)-push0
	got, gotMsgs := counter(receivedBytes, b)-got0, counter(receivedMessages, b)-gotMsgs0
	if d := float64(pushed) - sentMsgs; d < -1 || d > 1 {
		t.Errorf("push durations observed %d times for %v messages written: want one per message", pushed, sentMsgs)
	}
	// Messages in flight at either end of the window: one either way.
	if d := gotMsgs - sentMsgs; d < -1 || d > 1 {
		t.Errorf("B received %v messages while A wrote %v", gotMsgs, sentMsgs)
	}
	// Per message: received (the frame's body) = sent (the frame) - its 1-byte length
	// prefix; the heartbeats' sequence numbers may grow by a byte within the window.
	perSent, perGot := sent/sentMsgs, got/gotMsgs
	if d := perSent - perGot; d < 0 || d > 2 {
		t.Errorf("B received %.1f bytes per message, A wrote %.1f: want the same frames (bytes sent %v, received %v)", perGot, perSent, sent, got)
	}

	// Discovery removes B from A's peers: A's gauges go to 0 at once.
	a.members.DeletePeer(b.meta().ID())
	wait.For(t, 2*time.Second, func() string {
		if gauge(peersGauge, a) == 0 && gauge(inSync, a) == 0 {
			return ""
		}
		return "epp_peer_sync_peers and _peers_in_sync of A after B was removed: want 0 and 0"
	})
}
