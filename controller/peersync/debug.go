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
}

// BroadcastStatus is one broadcast: whether it is warm (a peer's snapshot arrived
// whole, or it asks for none), the messages sent and received, and per peer what
// was delivered and what is missing.
type BroadcastStatus struct {
	Name             string  `json:"name"`
	Warm             bool    `json:"warm"`
	WarmAfterSeconds float64 `json:"warmAfterSeconds,omitempty"`
	// WarmFrom is the peer whose snapshot warmed it; WarmEmpty: warm with none
	// (no peer, every peer cold, or none answered).
	WarmFrom  string `json:"warmFrom,omitempty"`
	WarmEmpty bool   `json:"warmEmpty,omitempty"`
	// Seq is the number of the last frame this replica published.
	Seq      uint64 `json:"seq"`
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
	// Missing is the peers' frames this replica knows it is missing now.
	Missing int64                 `json:"missing"`
	Peers   []BroadcastPeerStatus `json:"peers"`
}

// BroadcastPeerStatus is one peer of a broadcast: this replica's frames delivered
// to it, skipped (it asks for them again) and resent, the resyncs served to it and
// received from it, and the peer's frames found missing here (gaps) and still
// missing.
type BroadcastPeerStatus struct {
	Peer            string  `json:"peer"`
	Delivered       float64 `json:"delivered"`
	Skipped         float64 `json:"skipped"`
	Resent          float64 `json:"resent"`
	ResyncsServed   float64 `json:"resyncsServed"`
	ResyncsReceived float64 `json:"resyncsReceived"`
	Gaps            float64 `json:"gaps"`
	Missing         int64   `json:"missing"`
	// Seq is the last frame of the peer's process seen here.
	Seq uint64 `json:"seq"`
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
	for _, reason := range rejectReasons {
		if n := counterValue(s.m.rejections.WithLabelValues(reason)); n > 0 {
			doc.Rejections[reason] = n
		}
	}
	s.mu.Lock()
	peerNames := map[int]string{}
	for _, rec := range s.peers {
		ps := PeerStatus{ID: rec.id, Address: rec.meta.Address, Port: rec.meta.Port, InSync: rec.valid.Load() != 0,
			Inbound: rec.in != nil, Entries: rec.entries.Load(), Outbound: "down"}
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
	st := BroadcastStatus{Name: b.name, Warm: b.isWarm(), WarmAfterSeconds: b.WarmAfter().Seconds(), WarmEmpty: b.isWarm() && b.warmEmpty.Load(),
		Sent: sent, Received: received, Missing: b.missing.Load(), Peers: []BroadcastPeerStatus{}}
	if p := b.warmFrom.Load(); p != nil {
		st.WarmFrom = *p
	}
	b.flushMu.Lock()
	st.Seq = b.seq
	b.flushMu.Unlock()
	s.mu.Lock()
	recs := make([]*peerRec, 0, len(s.peers))
	for _, rec := range s.peers {
		recs = append(recs, rec)
	}
	s.mu.Unlock()
	for _, rec := range recs {
		ps := BroadcastPeerStatus{Peer: rec.id}
		if v, ok := b.peers.Load(rec.id); ok {
			pc := v.(*broadcastPeer)
			ps.Delivered, ps.Skipped, ps.Resent = counterValue(pc.delivered), counterValue(pc.skipped), counterValue(pc.resent)
			ps.ResyncsServed, ps.ResyncsReceived, ps.Gaps = counterValue(pc.resyncsServed), counterValue(pc.resyncsReceived), counterValue(pc.gaps)
		}
		c := rec.cursor(b.name)
		c.lock.Lock()
		ps.Missing, ps.Seq = count(c.missing), c.high
		c.lock.Unlock()
		st.Peers = append(st.Peers, ps)
	}
	slices.SortFunc(st.Peers, func(a, b BroadcastPeerStatus) int { return strings.Compare(a.Peer, b.Peer) })
	return st
}
