package peersync

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label is the label of every metric that names the syncer instance (the plugin's
// name in an EPP).
const Label = "syncer"

var (
	pushSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "epp_peer_sync_push_duration_seconds",
		Help:    "Time from building an interval's message to having written it to a peer's connection.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 4, 9),
	}, []string{Label})
	sentBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_sent_bytes_total",
		Help: "Bytes of state messages written to peers.",
	}, []string{Label})
	receivedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_received_bytes_total",
		Help: "Bytes of messages read from peers.",
	}, []string{Label})
	sentMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_sent_messages_total",
		Help: "State messages written to peers (one per peer per interval).",
	}, []string{Label})
	receivedMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_received_messages_total",
		Help: "State messages read from peers.",
	}, []string{Label})
	fullStates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_full_states_total",
		Help: "Full states written to peers (a new connection, or a peer too slow for the deltas).",
	}, []string{Label})
	rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_rejections_total",
		Help: "Connections and messages refused, by reason: unknown-source, identity, stale-incarnation, clock-skew, not-ready, too-many-pending, handshake-timeout, preface, tls, oversized, value-too-large (per value), undecodable (per value), malformed, stalled, too-many-entries, too-many-keys, unknown-broadcast (per frame), budget (a peer over its budget; its connections closed), and a broadcast consumer's own reasons.",
	}, []string{Label, "reason"})
	connectErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_push_errors_total",
		Help: "Failures to connect or write to a peer, by reason: refused, timeout, reset, tls, banner, wrong-peer, other.",
	}, []string{Label, "reason"})
	dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_slow_peer_restarts_total",
		Help: "Times a peer fell so far behind that its connection started again from a full state.",
	}, []string{Label})
	peersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_sync_peers",
		Help: "Peers in the membership (the discovered peer set).",
	}, []string{Label})
	inSync = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_sync_peers_in_sync",
		Help: "Peers whose values count: a full state received, and a message within the TTL.",
	}, []string{Label})
	expired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_values_expired_total",
		Help: "Peers' values that stopped counting, by cause: ttl (the peer was silent), removed (discovery removed it), replaced (a new connection's full state), closed (its connection ended and none came back within the TTL).",
	}, []string{Label, "cause"})
	pendingGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "epp_peer_sync_pending_connections",
		Help: "Connections accepted and not yet admitted: waiting for discovery to list their source or name, or in their handshake (bounded by maxPending).",
	}, []string{Label})
	acceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_accept_errors_total",
		Help: "Errors accepting a connection on the peer-sync port (too many open files, say): each is retried after a backoff.",
	}, []string{Label})
	broadcastMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_broadcast_frames_total",
		Help: "Frames of a broadcast (the messages published within one window, or one message to one peer alone), by direction: sent (published, once whatever the peers), received (from any peer, published or to this replica alone).",
	}, []string{Label, "broadcast", "direction"})
	broadcastPeerFrames = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_broadcast_peer_frames_total",
		Help: "Published frames of a broadcast, per peer, by outcome: delivered (written to the peer's connection), skipped (no connection that takes it, or the peer read too slowly: a consumer that needs it repairs it).",
	}, []string{Label, "broadcast", "peer", "outcome"})
	broadcastDirectBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_broadcast_direct_bytes_total",
		Help: "Bytes of a broadcast's messages to one peer alone (requests and answers, as a repair exchanges them), per peer, by direction: sent (charged to the peer's budget), received.",
	}, []string{Label, "broadcast", "peer", "direction"})
	unsendable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "epp_peer_sync_unsendable_values_total",
		Help: "Local values not sent because they could not be encoded or were over maxValueBytes.",
	}, []string{Label})
)

func init() {
	ctrlmetrics.Registry.MustRegister(pushSeconds, sentBytes, receivedBytes, sentMessages, receivedMessages, fullStates,
		rejections, connectErrors, dropped, peersGauge, inSync, expired, unsendable, pendingGauge, acceptErrors,
		broadcastMessages, broadcastPeerFrames, broadcastDirectBytes)
}

// instanceMetrics are one syncer's metrics.
type instanceMetrics struct {
	pushSeconds      prometheus.Observer
	sentBytes        prometheus.Counter
	receivedBytes    prometheus.Counter
	sentMessages     prometheus.Counter
	receivedMessages prometheus.Counter
	fullStates       prometheus.Counter
	rejections       *prometheus.CounterVec
	connectErrors    *prometheus.CounterVec
	dropped          prometheus.Counter
	peers            prometheus.Gauge
	inSync           prometheus.Gauge
	expired          *prometheus.CounterVec
	unsendable       prometheus.Counter
	pending          prometheus.Gauge
	acceptErrors     prometheus.Counter

	broadcastMessages    *prometheus.CounterVec
	broadcastPeerFrames  *prometheus.CounterVec
	broadcastDirectBytes *prometheus.CounterVec

	mu     sync.Mutex
	logged map[string]time.Time
}

func metricsFor(instance string) *instanceMetrics {
	l := prometheus.Labels{Label: instance}
	m := &instanceMetrics{
		pushSeconds:      pushSeconds.With(l),
		sentBytes:        sentBytes.With(l),
		receivedBytes:    receivedBytes.With(l),
		sentMessages:     sentMessages.With(l),
		receivedMessages: receivedMessages.With(l),
		fullStates:       fullStates.With(l),
		rejections:       rejections.MustCurryWith(l),
		connectErrors:    connectErrors.MustCurryWith(l),
		dropped:          dropped.With(l),
		peers:            peersGauge.With(l),
		inSync:           inSync.With(l),
		expired:          expired.MustCurryWith(l),
		unsendable:       unsendable.With(l),
		pending:          pendingGauge.With(l),
		acceptErrors:     acceptErrors.With(l),

		broadcastMessages:    broadcastMessages.MustCurryWith(l),
		broadcastPeerFrames:  broadcastPeerFrames.MustCurryWith(l),
		broadcastDirectBytes: broadcastDirectBytes.MustCurryWith(l),
		logged:               map[string]time.Time{},
	}
	for _, r := range rejectReasons {
		m.rejections.WithLabelValues(r)
	}
	for _, c := range []string{causeTTL, causeRemoved, causeReplaced, causeClosed} {
		m.expired.WithLabelValues(c)
	}
	return m
}

// rateLimit reports whether a log line of this kind may be written now (one a
// second).
func (m *instanceMetrics) rateLimit(kind string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.logged[kind]) < time.Second {
		return false
	}
	m.logged[kind] = now
	return true
}
