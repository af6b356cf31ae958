package debugpeers

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// TestRenderLayout: the status on the first line, one peer per line, a space after
// every colon and comma (what `grep '"synced": true'` and people rely on).
func TestRenderLayout(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	head := peers.Document{Enabled: true, Source: "endpointslice", Synced: ptr.To(true),
		Self: &peers.SelfDocument{Name: "epp-0", Namespace: "ns", Addresses: []string{"10.0.0.1"}}, UpdatedAt: &at, Stale: ptr.To(false)}
	ps := []peers.PeerMetadata{
		{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005, Ready: true, Serving: true},
		{Namespace: "ns", Name: "epp-2", Address: "fd00::3", Port: 9005, Ready: true, Serving: true},
	}
	var r docRenderer
	want := `{"enabled": true, "source": "endpointslice", "synced": true, "self": {"name": "epp-0", "namespace": "ns", "addresses": ["10.0.0.1"]}, "peers": [
  {"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005, "ready": true, "serving": true, "terminating": false},
  {"id": "ns/epp-2", "name": "epp-2", "namespace": "ns", "address": "fd00::3", "port": 9005, "ready": true, "serving": true, "terminating": false}
], "updatedAt": "2026-11-29T10:00:00Z", "stale": false}
`
	if got := string(r.render(head, ps, nil)); got != want {
		t.Fatalf("rendering:\n%s\nwant:\n%s", got, want)
	}
	// With probing on: the reachability fields after the conditions.
	probed := func(id string) reachability.Status {
		if id == "ns/epp-1" {
			return reachability.Status{Probed: true, Reachable: true, LastProbe: at, ConnectTime: 420 * time.Microsecond}
		}
		return reachability.Status{Probed: true, LastProbe: at, Error: "timeout"}
	}
	want = `{"enabled": true, "source": "endpointslice", "synced": true, "self": {"name": "epp-0", "namespace": "ns", "addresses": ["10.0.0.1"]}, "peers": [
  {"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005, "ready": true, "serving": true, "terminating": false, "reachable": true, "lastProbe": "2026-11-29T10:00:00Z", "connectSeconds": 0.00042},
  {"id": "ns/epp-2", "name": "epp-2", "namespace": "ns", "address": "fd00::3", "port": 9005, "ready": true, "serving": true, "terminating": false, "reachable": false, "lastProbe": "2026-11-29T10:00:00Z", "probeError": "timeout"}
], "updatedAt": "2026-11-29T10:00:00Z", "stale": false}
`
	if got := string(r.render(head, ps, probed)); got != want {
		t.Fatalf("rendering with probes:\n%s\nwant:\n%s", got, want)
	}
	if got, want := string(r.render(peers.DisabledDocument(), nil, nil)), `{"enabled": false, "peers": []}`+"\n"; got != want {
		t.Fatalf("disabled: %q, want %q", got, want)
	}
}

// TestRenderMatchesEncodingJSON drives one renderer through random sets (peers
// joining, leaving, changing; odd strings that need escaping) and checks every
// rendering: it decodes to the document encoding/json gives, and it is byte for
// byte what a fresh renderer gives (reusing entries changes nothing).
func TestRenderMatchesEncodingJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	names := []string{"epp-1", "epp-2", "epp-10", `odd"name`, "üñí", "a<b>&c", "tab\tname", "epp-3"}
	set := map[string]peers.PeerMetadata{}
	probes := map[string]reachability.Status{}
	var r docRenderer
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	for step := range 2000 {
		for id := range set {
			if rnd.IntN(10) == 0 { // a probe result: unprobed, reachable or not
				switch rnd.IntN(3) {
				case 0:
					delete(probes, id)
				case 1:
					probes[id] = reachability.Status{Probed: true, Reachable: true, LastProbe: at.Add(time.Duration(step) * time.Second), ConnectTime: time.Duration(rnd.IntN(5000)) * time.Microsecond}
				default:
					probes[id] = reachability.Status{Probed: true, LastProbe: at, Error: []string{"timeout", `dial "x": refused`}[rnd.IntN(2)]}
				}
			}
		}
		probe := func(id string) reachability.Status { return probes[id] }
		for range 1 + rnd.IntN(3) {
			p := peers.PeerMetadata{Namespace: []string{"ns", "other"}[rnd.IntN(2)], Name: names[rnd.IntN(len(names))],
				Address: fmt.Sprintf("10.0.0.%d", rnd.IntN(4)), Port: int32(9000 + rnd.IntN(2)), Ready: rnd.IntN(2) == 0}
			if rnd.IntN(3) == 0 {
				delete(set, p.ID())
			} else {
				set[p.ID()] = p
			}
		}
		ps := make([]peers.PeerMetadata, 0, len(set))
		for _, p := range set {
			ps = append(ps, p)
		}
		peers.SortByID(ps)
		head := peers.Document{Enabled: true, Source: "endpointslice", Synced: ptr.To(step%2 == 0), Stale: ptr.To(step%3 == 0),
			Self: &peers.SelfDocument{Name: names[step%len(names)], Addresses: []string{}}, LastError: `dial "x": refused`}
		got := r.render(head, slices.Clone(ps), probe)
		var fresh docRenderer
		if again := fresh.render(head, ps, probe); string(again) != string(got) {
			t.Fatalf("step %d: reused rendering differs from a fresh one:\n%s\n%s", step, got, again)
		}
		want := head
		want.Peers = peers.Entries(ps)
		for i := range want.Peers {
			withProbe(&want.Peers[i], probes[ps[i].ID()])
		}
		std, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var a, b peers.Document
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("step %d: not JSON: %v\n%s", step, err, got)
		}
		if err := json.Unmarshal(std, &b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(b, a); diff != "" {
			t.Fatalf("step %d: decodes differently from encoding/json (-want +got):\n%s", step, diff)
		}
	}
}

// BenchmarkDocument renders the /debug/peers document of 10,000 peers after one peer
// changed: this renderer (reusing the other entries), the same from scratch, and
// encoding/json's MarshalIndent of the Document (what epp did before).
func BenchmarkDocument(b *testing.B) {
	const n = 10000
	ps := make([]peers.PeerMetadata, n)
	for i := range ps {
		ps[i] = peers.PeerMetadata{Namespace: "ns", Name: fmt.Sprintf("epp-%05d", i), Address: fmt.Sprintf("10.0.%d.%d", i>>8, i&255), Port: 9005, Ready: true, Serving: true}
	}
	head := peers.Document{Enabled: true, Source: "endpointslice", Synced: ptr.To(true), Stale: ptr.To(false),
		Self: &peers.SelfDocument{Name: "epp-x", Namespace: "ns", Addresses: []string{"10.1.0.1"}}}
	// Two sets that differ in one peer, rendered in turn.
	other := slices.Clone(ps)
	other[n/2].Ready = false
	sets := [][]peers.PeerMetadata{ps, other}
	b.Run("renderer, one peer changed", func(b *testing.B) {
		var r docRenderer
		r.render(head, ps, nil)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			r.render(head, sets[i%2], nil)
		}
	})
	b.Run("renderer, from scratch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r docRenderer
			r.render(head, ps, nil)
		}
	})
	b.Run("encoding/json MarshalIndent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doc := head
			doc.Peers = peers.Entries(ps)
			if _, err := json.MarshalIndent(doc, "", "  "); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// withProbe sets a document entry's reachability fields from st, as
// encoding/json would carry them (the reference the renderer is checked against).
func withProbe(e *peers.PeerEntry, st reachability.Status) {
	if !st.Probed {
		return
	}
	reachable, at := st.Reachable, st.LastProbe.UTC()
	e.Reachable, e.LastProbe = &reachable, &at
	if st.Reachable {
		secs := st.ConnectTime.Seconds()
		e.ConnectSeconds = &secs
	} else {
		e.ProbeError = st.Error
	}
}
