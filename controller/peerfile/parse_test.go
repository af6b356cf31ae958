package peerfile_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

var defaults = peerfile.Defaults{Namespace: "ns", Port: 9005}

// rp is a peer as a file gives it without conditions: ready and serving.
func rp(ns, name, addr string, port int32) peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: ns, Name: name, Address: addr, Port: port, Ready: true, Serving: true}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []peers.PeerMetadata
	}{
		{"JSON", `{"peers": [{"name": "b", "namespace": "team", "address": "10.0.0.2", "port": 7000}, {"name": "a", "namespace": "team", "address": "10.0.0.1", "port": 7000}]}`,
			[]peers.PeerMetadata{rp("team", "a", "10.0.0.1", 7000), rp("team", "b", "10.0.0.2", 7000)}},
		{"YAML with defaults for namespace and port", "peers:\n- name: a\n  address: 10.0.0.1\n- {name: b, address: 'fd00:0::2', port: 1}\n",
			[]peers.PeerMetadata{rp("ns", "a", "10.0.0.1", 9005), rp("ns", "b", "fd00::2", 1)}},
		{"empty list", `{"peers": []}`, []peers.PeerMetadata{}},
		{"the /debug/peers document", `{"enabled": true, "source": "endpointslice", "synced": true,
			"self": {"name": "epp-0", "namespace": "ns", "addresses": ["10.0.0.1"]},
			"peers": [{"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005}],
			"updatedAt": "2026-11-29T10:00:00Z"}`,
			[]peers.PeerMetadata{rp("ns", "epp-1", "10.0.0.2", 9005)}},
		{"the disabled document", `{"enabled": false, "peers": []}`, []peers.PeerMetadata{}},
		{"the document of a stale replica", `{"enabled": true, "source": "endpointslice", "synced": true, "stale": true,
			"staleSince": "2026-11-29T10:00:00Z", "staleReason": "refused", "lastError": "dial tcp: connection refused",
			"peers": [{"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005}]}`,
			[]peers.PeerMetadata{rp("ns", "epp-1", "10.0.0.2", 9005)}},
		{"the document of a replica that probes its peers", `{"enabled": true, "peers": [
			{"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005, "ready": true, "serving": true, "terminating": false,
			 "reachable": false, "lastProbe": "2026-11-29T10:00:00Z", "probeError": "timeout"},
			{"id": "ns/epp-2", "name": "epp-2", "namespace": "ns", "address": "10.0.0.3", "port": 9005, "reachable": true, "connectSeconds": 0.0004}]}`,
			[]peers.PeerMetadata{rp("ns", "epp-1", "10.0.0.2", 9005), rp("ns", "epp-2", "10.0.0.3", 9005)}},
		{"conditions as /debug/peers gives them", `{"peers": [
			{"name": "a", "address": "10.0.0.1", "ready": false},
			{"name": "b", "address": "10.0.0.2", "ready": false, "serving": true, "terminating": true}]}`,
			[]peers.PeerMetadata{{Namespace: "ns", Name: "a", Address: "10.0.0.1", Port: 9005},
				{Namespace: "ns", Name: "b", Address: "10.0.0.2", Port: 9005, Serving: true, Terminating: true}}},
		{"port 65535", `{"peers": [{"name": "a", "address": "10.0.0.1", "port": 65535}]}`,
			[]peers.PeerMetadata{rp("ns", "a", "10.0.0.1", 65535)}},
		// A newer epp's snapshot: fields this version does not know, in the
		// document and in an entry, of any type, are ignored.
		{"a newer document with fields added", `{"enabled": true, "source": "dns", "synced": true, "sync": {"keys": 3},
			"generation": 42, "peers": [{"id": "ns/epp-1", "name": "epp-1", "namespace": "ns", "address": "10.0.0.2", "port": 9005,
			"ready": true, "zone": "eu-1", "weights": [1, 2], "syncedAt": null}]}`,
			[]peers.PeerMetadata{rp("ns", "epp-1", "10.0.0.2", 9005)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := peerfile.Parse([]byte(tc.in), defaults)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error: the entry and the field at fault
	}{
		{"not YAML", "peers: [", []string{"not a peers document"}},
		{"empty", "  \n", []string{"empty"}},
		{"no peers field", `{"peer": []}`, []string{"peer"}},
		{"peers null", `{"peers": null}`, []string{`no "peers" field`}},
		{"a typo for address", `{"peers": [{"name": "a", "adress": "10.0.0.1"}]}`, []string{"peers[0]", "address: required"}}, //nolint:misspell // the typo is the test
		{"IPv4 with a typo", `{"peers": [{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.300"}]}`,
			[]string{"peers[1]", "name b", "address", "10.0.0.300"}},
		{"IPv6 in brackets", `{"peers": [{"name": "a", "address": "[fd00::1]"}]}`, []string{"peers[0]", "address", "without brackets"}},
		{"IPv6 with a zone", `{"peers": [{"name": "a", "address": "fe80::1%eth0"}]}`, []string{"peers[0]", "address"}},
		{"hostname", `{"peers": [{"name": "a", "address": "epp-1.example"}]}`, []string{"address"}},
		{"no address", `{"peers": [{"name": "a"}]}`, []string{"peers[0]", "address: required"}},
		{"no name", `{"peers": [{"address": "10.0.0.1"}]}`, []string{"peers[0]", "name: required"}},
		{"port 0", `{"peers": [{"name": "a", "address": "10.0.0.1", "port": 0}]}`, []string{"peers[0]", "name a", "port", "1..65535"}},
		{"port 70000", `{"peers": [{"name": "a", "address": "10.0.0.1", "port": 70000}]}`, []string{"port: 70000"}},
		{"port as a string", `{"peers": [{"name": "a", "address": "10.0.0.1", "port": "9005"}]}`, []string{"port"}},
		{"duplicate identity", `{"peers": [{"name": "a", "address": "10.0.0.1"}, {"name": "a", "namespace": "ns", "address": "10.0.0.2"}]}`,
			[]string{"peers[1]", "name a", "duplicate of peers[0]"}},
		{"id that does not match", `{"peers": [{"id": "ns/b", "name": "a", "address": "10.0.0.1"}]}`, []string{"id", "ns/a"}},
		{"bad namespace", `{"peers": [{"name": "a", "namespace": "Team_A", "address": "10.0.0.1"}]}`, []string{"namespace", "Team_A"}},
		{"over 1 MiB", `{"peers": [], "source": "` + strings.Repeat("x", peerfile.MaxSize) + `"}`, []string{"1 MiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := peerfile.Parse([]byte(tc.in), defaults)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"peers": [{"name": "a", "address": "10.0.0.1", "port": 1}]}`))
	f.Add([]byte("peers:\n- {name: b, address: 'fd00::2'}\n"))
	f.Add([]byte(`{"enabled": true, "peers": [{"id": "ns/a", "name": "a", "namespace": "ns", "address": "10.0.0.1", "port": 9005}]}`))
	f.Add([]byte(`{"peers": [{"name": "a", "address": "10.0.0.1"}, {"name": "a", "address": "10.0.0.2"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := peerfile.Parse(data, defaults)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with a non-nil result", err)
			}
			return
		}
		// Whatever is accepted is a valid, ordered, duplicate-free peer set that
		// survives a round trip through the /debug/peers document.
		for i, p := range got {
			if p.Name == "" || p.Namespace == "" || p.Port < 1 || p.Port > 65535 {
				t.Fatalf("accepted an invalid peer %+v", p)
			}
			if i > 0 && peers.CompareID(got[i-1], p) >= 0 {
				t.Fatalf("not strictly ordered by id: %s then %s", got[i-1].ID(), p.ID())
			}
		}
		doc := peers.Document{Enabled: true, Peers: peers.Entries(got)}
		again, err := peerfile.Parse(mustJSON(t, doc), defaults)
		if err != nil {
			t.Fatalf("the document of an accepted file is rejected: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip changed the set:\n%s", diff)
		}
	})
}
