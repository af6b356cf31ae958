package peersync

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync/internal/wire"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// benchSyncer is a syncer (not running) with n peers whose full states, as the
// wire brings them, hold a value for each of endpoints endpoints.
func benchSyncer(tb testing.TB, n, endpoints int) (*Syncer, []string) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	s, err := New(Options{Self: peers.Self{Namespace: "ns", Name: "self"}, Peers: peers.NewMemoryPeerStore(), Listener: l, Instance: fmt.Sprintf("bench-%d-%d", n, time.Now().UnixNano())})
	if err != nil {
		tb.Fatal(err)
	}
	eps := make([]string, endpoints)
	for i := range eps {
		eps[i] = fmt.Sprintf("llm/vllm-%d", i)
		if err := s.Set("inflight:p", eps[i], &load{Requests: 1, Tokens: 100}); err != nil {
			tb.Fatal(err)
		}
	}
	addBenchPeers(tb, s, n, endpoints, "llm/vllm")
	return s, eps
}

// addBenchPeers adds n peers (ns/epp-0, ...) to s, each with a full state, as the
// wire brings it, of a value for endpoints endpoints named prefix-0, prefix-1, ...
func addBenchPeers(tb testing.TB, s *Syncer, n, endpoints int, prefix string) {
	tb.Helper()
	c := wire.CodecFor(reflect.TypeOf(&load{}))
	for range n {
		s.mu.Lock()
		p := len(s.peers)
		rec := &peerRec{id: fmt.Sprintf("ns/epp-%d", p), idx: s.allocIdx()}
		s.peers[rec.id] = rec
		s.growSlots(s.nextIdx)
		s.publishMembersLocked()
		s.mu.Unlock()
		st := wire.State{Full: true, Seq: 1, Keys: []wire.KeyDef{{Index: 1, Name: "inflight:p", Codec: c.Kind, Fields: c.Fields}}}
		for i := range endpoints {
			data, _ := c.Encode(nil, &load{Requests: int64(p), Tokens: 10})
			st.Entries = append(st.Entries, wire.EntryDef{Index: uint64(i + 1), Key: 1, Endpoint: fmt.Sprintf("%s-%d", prefix, i)})
			st.Values = append(st.Values, wire.ValueDef{Entry: uint64(i + 1), Data: data})
		}
		in := &inStream{hello: wire.Hello{Name: rec.id}}
		s.mu.Lock()
		in.rec, rec.in = rec, in
		rec.current.Store(in)
		s.mu.Unlock()
		if _, err := s.apply(in, &st, time.Now()); err != nil {
			tb.Fatal(err)
		}
	}
}

// deltaSource applies, as every peer of s, deltas that change the value of every
// endpoint.
type deltaSource struct {
	tb     testing.TB
	s      *Syncer
	ins    []*inStream
	states []wire.State
	round  int64
}

func newDeltaSource(tb testing.TB, s *Syncer, eps []string) *deltaSource {
	d := &deltaSource{tb: tb, s: s}
	s.mu.Lock()
	for _, rec := range s.peers {
		d.ins = append(d.ins, rec.in)
	}
	s.mu.Unlock()
	d.states = make([]wire.State, len(d.ins))
	for i := range d.states {
		for e := range eps {
			d.states[i].Values = append(d.states[i].Values, wire.ValueDef{Entry: uint64(e + 1)})
		}
	}
	return d
}

// apply applies one delta of every peer, each value new.
func (d *deltaSource) apply() {
	d.round++
	c := wire.CodecFor(reflect.TypeOf(&load{}))
	data, _ := c.Encode(nil, &load{Requests: d.round % 7, Tokens: d.round})
	for i, in := range d.ins {
		st := &d.states[i]
		st.Seq = uint64(d.round + 1)
		for v := range st.Values {
			st.Values[v].Data = data
		}
		if _, err := d.s.apply(in, st, time.Now()); err != nil {
			d.tb.Fatal(err)
		}
	}
}

// mutexSyncer is the reference: the plain way, one lock around a map of every
// replica's value per (key, endpoint), values copied out under the lock.
type mutexSyncer struct {
	mu   sync.RWMutex
	vals map[string]map[string]any // key+endpoint -> replica -> value
}

func (m *mutexSyncer) Get(key, endpoint string, aggregate func([]any) any) (any, bool) {
	m.mu.RLock()
	row := m.vals[key+"\x00"+endpoint]
	vals := make([]any, 0, len(row))
	for _, v := range row {
		vals = append(vals, v)
	}
	m.mu.RUnlock()
	if len(vals) == 0 {
		return nil, false
	}
	return aggregate(vals), true
}

func newMutexSyncer(n int, eps []string) *mutexSyncer {
	m := &mutexSyncer{vals: map[string]map[string]any{}}
	for _, ep := range eps {
		row := map[string]any{"self": &load{Requests: 1}}
		for p := range n {
			row[fmt.Sprintf("ns/epp-%d", p)] = &load{Requests: int64(p)}
		}
		m.vals["inflight:p\x00"+ep] = row
	}
	return m
}

// BenchmarkGet is Get on the request path (the EPP reads the aggregate of every
// candidate endpoint), at 3, 10 and 30 peers, beside the mutex-and-map reference in
// the same run; the sum is llm-d-router's in-flight load aggregate's shape.
func BenchmarkGet(b *testing.B) {
	for _, n := range []int{3, 10, 30} {
		s, eps := benchSyncer(b, n, 100)
		want := int64(1 + n*(n-1)/2)
		b.Run(fmt.Sprintf("peersync/peers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v, ok := s.Get("inflight:p", eps[i%len(eps)], sum)
				if !ok || v.(*load).Requests != want {
					b.Fatalf("Get = %v %v, want %d", v, ok, want)
				}
				i++
			}
		})
		ref := newMutexSyncer(n, eps)
		b.Run(fmt.Sprintf("mutex-map/peers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := ref.Get("inflight:p", eps[i%len(eps)], sum); !ok {
					b.Fatal("miss")
				}
				i++
			}
		})
	}
}

// BenchmarkGetAfterChange is the first Get of every endpoint after every peer's
// value of it changed (values are decoded when they arrive, not on this read), at 30
// peers, beside the mutex-and-map reference in the same run, whose values are
// replaced the same way. Only the Gets are timed.
func BenchmarkGetAfterChange(b *testing.B) {
	const n = 30
	s, eps := benchSyncer(b, n, 100)
	deltas := newDeltaSource(b, s, eps)
	b.Run(fmt.Sprintf("peersync/peers=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		gets := 0
		for b.Loop() {
			b.StopTimer()
			deltas.apply()
			b.StartTimer()
			for _, ep := range eps {
				if _, ok := s.Get("inflight:p", ep, sum); !ok {
					b.Fatal("miss")
				}
			}
			gets += len(eps)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(gets), "ns/get")
	})
	ref := newMutexSyncer(n, eps)
	b.Run(fmt.Sprintf("mutex-map/peers=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		gets := 0
		round := int64(0)
		for b.Loop() {
			b.StopTimer()
			round++
			ref.replace(n, eps, round)
			b.StartTimer()
			for _, ep := range eps {
				if _, ok := ref.Get("inflight:p", ep, sum); !ok {
					b.Fatal("miss")
				}
			}
			gets += len(eps)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(gets), "ns/get")
	})
}

// replace gives every peer a new value of every endpoint.
func (m *mutexSyncer) replace(n int, eps []string, round int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ep := range eps {
		row := m.vals["inflight:p\x00"+ep]
		for p := range n {
			row[fmt.Sprintf("ns/epp-%d", p)] = &load{Requests: round % 7, Tokens: round}
		}
	}
}

// BenchmarkGetParallel is Get from every core at once while a peer's deltas are
// applied, at 30 peers.
func BenchmarkGetParallel(b *testing.B) {
	s, eps := benchSyncer(b, 30, 1000)
	stop := make(chan struct{})
	defer close(stop)
	go applyDeltas(s, eps, stop)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := s.Get("inflight:p", eps[i%len(eps)], sum); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// applyDeltas applies, as peer 0, deltas that change every value, until stop.
func applyDeltas(s *Syncer, eps []string, stop <-chan struct{}) {
	var rec *peerRec
	s.mu.Lock()
	rec = s.peers["ns/epp-0"]
	in := rec.in
	s.mu.Unlock()
	c := wire.CodecFor(reflect.TypeOf(&load{}))
	for seq := uint64(2); ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		st := wire.State{Seq: seq}
		data, _ := c.Encode(nil, &load{Requests: int64(seq % 7), Tokens: 10})
		for i := range eps {
			st.Values = append(st.Values, wire.ValueDef{Entry: uint64(i + 1), Data: data})
		}
		_, _ = s.apply(in, &st, time.Now())
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkReceive is what one peer's delta costs the receiver per value (parse and
// apply), every value of 1,000 endpoints changed.
func BenchmarkReceive(b *testing.B) {
	s, eps := benchSyncer(b, 1, 1000)
	s.mu.Lock()
	in := s.peers["ns/epp-0"].in
	s.mu.Unlock()
	c := wire.CodecFor(reflect.TypeOf(&load{}))
	st := wire.State{Seq: 2}
	for i := range eps {
		data, _ := c.Encode(nil, &load{Requests: int64(i % 9), Tokens: int64(i * 31)})
		st.Values = append(st.Values, wire.ValueDef{Entry: uint64(i + 1), Data: data})
	}
	frame := wire.AppendState(nil, &st)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	// As a connection does: one message buffer and one decoded state, reused.
	var parsed wire.State
	var buf []byte
	r := bytes.NewReader(frame)
	br := bufio.NewReader(r)
	for b.Loop() {
		r.Reset(frame)
		br.Reset(r)
		body, err := wire.ReadFrameInto(br, 1<<30, buf)
		if err != nil {
			b.Fatal(err)
		}
		buf = body
		if _, err := wire.ParseStateInto(&parsed, body, s.lim); err != nil {
			b.Fatal(err)
		}
		if _, err := s.apply(in, &parsed, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(eps)), "ns/value")
	b.ReportMetric(float64(len(frame))/float64(len(eps)), "bytes/value")
}

// BenchmarkTick is one push interval of this replica with 1,000 endpoints whose
// values all changed: encode the delta once (for every peer).
func BenchmarkTick(b *testing.B) {
	s, eps := benchSyncer(b, 0, 1000)
	s.tick()
	b.ReportAllocs()
	n := int64(0)
	for b.Loop() {
		n++
		for _, ep := range eps {
			_ = s.Set("inflight:p", ep, &load{Requests: n % 5, Tokens: n})
		}
		s.tick()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(eps)), "ns/endpoint")
}
