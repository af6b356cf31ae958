package peersync

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Document is the syncer's state as /debug/peer-sync serves it: the membership with
// each peer's connection, and per key and endpoint the values that count, each with
// its replica and age, and their aggregate where one is known (SetAggregate).
type Document struct {
	Self string `json:"self"`
	// Listed: this replica's discovery lists it as a member, so it pushes to its
	// peers (they accept only what they list).
	Listed bool `json:"listed"`
	// Rejections are the refusals counted so far, by reason (the reasons with
	// none left out): epp_peer_sync_rejections_total, where the metrics are not at
	// hand.
	Rejections map[string]float64 `json:"rejections"`
	Interval   string             `json:"interval"`
	// Broadcasts are the broadcasts registered here (a shared prefix index, say),
	// by name.
	Broadcasts []BroadcastStatus `json:"broadcasts"`
	TTL        string            `json:"ttl"`
	Peers      []PeerStatus      `json:"peers"`
	Keys       []KeyView         `json:"keys"`
}

// PeerStatus is one peer of the membership.
type PeerStatus struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int32  `json:"port"`
	// InSync: the peer's values count (a full state received, a message within the TTL).
	InSync bool `json:"inSync"`
	// Inbound: the peer is connected to this replica.
	Inbound bool `json:"inbound"`
	// LastMessageSeconds is the age of the last message from the peer.
	LastMessageSeconds *float64 `json:"lastMessageSeconds,omitempty"`
	// Entries the peer has defined on its connection.
	Entries int64 `json:"entries"`
	// Outbound is this replica's connection to the peer: "in-sync", "connecting" or
	// "down" (with OutboundError).
	Outbound      string `json:"outbound"`
	OutboundError string `json:"outboundError,omitempty"`
	// BudgetLeftBytes is what is left of the peer's budget (Options.PeerBudget).
	BudgetLeftBytes float64 `json:"budgetLeftBytes"`
}

// BroadcastStatus is one broadcast: the messages published and received, and per
// peer the frames delivered and skipped and the bytes sent to it alone and
// received from it alone.
type BroadcastStatus struct {
	Name     string                `json:"name"`
	Sent     uint64                `json:"sent"`
	Received uint64                `json:"received"`
	Peers    []BroadcastPeerStatus `json:"peers"`
}

// BroadcastPeerStatus is one peer of a broadcast: this replica's published frames
// delivered to it and skipped (no connection, or it read too slowly), and the
// bytes of messages to it alone and from it alone.
type BroadcastPeerStatus struct {
	Peer                string  `json:"peer"`
	Delivered           float64 `json:"delivered"`
	Skipped             float64 `json:"skipped"`
	DirectBytesSent     float64 `json:"directBytesSent"`
	DirectBytesReceived float64 `json:"directBytesReceived"`
}

// KeyView is one state key.
type KeyView struct {
	Key       string         `json:"key"`
	Endpoints []EndpointView `json:"endpoints"`
}

// EndpointView is one endpoint of a key.
type EndpointView struct {
	Endpoint  string          `json:"endpoint"`
	Aggregate json.RawMessage `json:"aggregate,omitempty"`
	Values    []ReplicaValue  `json:"values"`
}

// ReplicaValue is one replica's value: "self" or the peer's ID.
type ReplicaValue struct {
	Replica    string          `json:"replica"`
	Value      json.RawMessage `json:"value"`
	AgeSeconds float64         `json:"ageSeconds"`
}

// SetAggregate records the aggregate of key's values, for the document only (Get
// takes its own).
func (s *Syncer) SetAggregate(key string, aggregate func([]any) any) {
	s.aggregates.Store(key, aggregate)
}

func (s *Syncer) aggregateOf(key string) func([]any) any {
	f, ok := s.aggregates.Load(key)
	if !ok {
		return nil
	}
	return f.(func([]any) any)
}

// Document returns the document, limited to keys and endpoints with these prefixes
// when they are not empty.
func (s *Syncer) Document(keyPrefix, endpointPrefix string) Document {
	now := s.o.now()
	doc := Document{Self: s.hello.ID(), Listed: true, Interval: s.o.Interval.String(), TTL: s.o.TTL.String(), Peers: []PeerStatus{}, Keys: []KeyView{}}
	if s.o.SelfListed != nil {
		doc.Listed, _ = s.o.SelfListed()
	}
	doc.Broadcasts = []BroadcastStatus{}
	s.broadcasts.Range(func(name, v any) bool {
		doc.Broadcasts = append(doc.Broadcasts, s.broadcastStatus(v.(*Broadcast)))
		return true
	})
	slices.SortFunc(doc.Broadcasts, func(a, b BroadcastStatus) int { return strings.Compare(a.Name, b.Name) })
	doc.Rejections = map[string]float64{}
	s.reasons.Range(func(k, _ any) bool {
		if n := counterValue(s.m.rejections.WithLabelValues(k.(string))); n > 0 {
			doc.Rejections[k.(string)] = n
		}
		return true
	})
	s.mu.Lock()
	peerNames := map[int]string{}
	for _, rec := range s.peers {
		ps := PeerStatus{ID: rec.id, Address: rec.meta.Address, Port: rec.meta.Port, InSync: rec.valid.Load() != 0,
			Inbound: rec.in != nil, Entries: rec.entries.Load(), Outbound: "down", BudgetLeftBytes: rec.budget.left(now)}
		if t := rec.lastHeard.Load(); t != 0 {
			age := now.Sub(time.Unix(0, t)).Seconds()
			ps.LastMessageSeconds = &age
		}
		if o := rec.out; o != nil {
			if c := o.conn.Load(); c != nil {
				ps.Outbound = "connecting"
				if c.inSync.Load() {
					ps.Outbound = "in-sync"
				}
			}
			if e := o.lastError.Load(); e != nil && ps.Outbound != "in-sync" {
				ps.OutboundError = *e
			}
		}
		doc.Peers = append(doc.Peers, ps)
		peerNames[rec.idx] = rec.id
	}
	s.mu.Unlock()
	slices.SortFunc(doc.Peers, func(a, b PeerStatus) int { return strings.Compare(a.ID, b.ID) })

	ms := *s.members.Load()
	var names []string
	keys := map[string]*keyState{}
	s.keys.Range(func(name, k any) bool {
		if strings.HasPrefix(name.(string), keyPrefix) {
			names = append(names, name.(string))
			keys[name.(string)] = k.(*keyState)
		}
		return true
	})
	slices.Sort(names)
	for _, name := range names {
		k := keys[name]
		kv := KeyView{Key: name, Endpoints: []EndpointView{}}
		var eps []string
		k.slots.Range(func(ep, _ any) bool {
			if strings.HasPrefix(ep.(string), endpointPrefix) {
				eps = append(eps, ep.(string))
			}
			return true
		})
		slices.Sort(eps)
		agg := s.aggregateOf(name)
		for _, ep := range eps {
			v, ok := k.slots.Load(ep)
			if !ok {
				continue
			}
			sl := v.(*slot)
			ev := EndpointView{Endpoint: ep, Values: []ReplicaValue{}}
			var counted []any
			if v := sl.local.Load(); v != nil {
				ev.Values = append(ev.Values, ReplicaValue{Replica: "self", Value: marshal(v), AgeSeconds: max(0, now.Sub(time.Unix(0, sl.localAt.Load())).Seconds())})
				counted = append(counted, v)
			}
			cells := *sl.cells.Load()
			for _, m := range ms {
				if m.idx >= len(cells) {
					continue
				}
				p := cells[m.idx].Load()
				if p == nil || p.gen != m.gen {
					continue
				}
				rv := ReplicaValue{Replica: peerNames[m.idx], AgeSeconds: now.Sub(time.Unix(0, p.at)).Seconds()}
				switch {
				case p.v != nil:
					rv.Value = marshal(p.v)
					counted = append(counted, p.v)
				case p.err != nil:
					// Not decodable as this replica's type of the key: left out of Get.
					rv.Value = marshal(map[string]any{"undecodable": p.err.Error()})
				default:
					// Not decodable as a local value (none set here yet): the peer's bytes.
					rv.Value = marshal(map[string]any{"undecoded": p.raw})
				}
				ev.Values = append(ev.Values, rv)
			}
			slices.SortFunc(ev.Values, func(a, b ReplicaValue) int { return strings.Compare(a.Replica, b.Replica) })
			if agg != nil && len(counted) > 0 {
				ev.Aggregate = marshal(agg(counted))
			}
			kv.Endpoints = append(kv.Endpoints, ev)
		}
		doc.Keys = append(doc.Keys, kv)
	}
	return doc
}

func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}

// ServeHTTP serves the document as JSON; the query parameters key and endpoint
// limit it to keys and endpoints with those prefixes.
func (s *Syncer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b := s.JSON(r.URL.Query().Get("key"), r.URL.Query().Get("endpoint"))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// JSON is the document as served.
func (s *Syncer) JSON(keyPrefix, endpointPrefix string) []byte {
	b, _ := json.Marshal(s.Document(keyPrefix, endpointPrefix))
	return append(b, '\n')
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// broadcastStatus is b as the document shows it.
func (s *Syncer) broadcastStatus(b *Broadcast) BroadcastStatus {
	sent, received := b.Stats()
	st := BroadcastStatus{Name: b.name, Sent: sent, Received: received, Peers: []BroadcastPeerStatus{}}
	s.mu.Lock()
	ids := make([]string, 0, len(s.peers))
	for id := range s.peers {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		ps := BroadcastPeerStatus{Peer: id}
		if v, ok := b.peers.Load(id); ok {
			pc := v.(*broadcastPeer)
			ps.Delivered, ps.Skipped = counterValue(pc.delivered), counterValue(pc.skipped)
			ps.DirectBytesSent, ps.DirectBytesReceived = counterValue(pc.directSent), counterValue(pc.directReceived)
		}
		st.Peers = append(st.Peers, ps)
	}
	slices.SortFunc(st.Peers, func(a, b BroadcastPeerStatus) int { return strings.Compare(a.Peer, b.Peer) })
	return st
}
