package debugpeers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// docRenderer renders the /debug/peers document: the status fields with
// encoding/json, the peers one per line by hand. An entry whose peer did not change
// since the previous rendering is copied from it, so a change of one peer among
// 10,000 costs one entry and a copy, not 10,000 encodings. Not safe for concurrent
// use.
//
// Layout: the status fields and `"peers": [` on the first line, one peer per line,
// then `],` and the remaining fields, with a space after every colon and comma as
// in docs/OPERATING.md (so `grep '"synced": true'` works). JSON readers see the same
// document as encoding/json gives (the test decodes both).
type docRenderer struct {
	prev       []peers.PeerMetadata  // the peers of the last rendering, ordered by ID
	prevProbes []reachability.Status // what the probes had found for them
	buf        []byte                // the last rendering
	spans      []span                // prev[i]'s entry is buf[spans[i].from:spans[i].to]
}

type span struct{ from, to int }

// emptyPeers is the head's (empty) peers field as spaced writes it; the rendering
// puts the peers there. No JSON string can hold it: inside one, every quote is
// escaped.
var emptyPeers = []byte(`"peers": []`)

// render returns head (its Peers ignored) with ps as its peers, and what probe says
// the reachability probes found for each (nil: probing off). ps must be ordered by
// ID (a store snapshot is) and must not be modified afterwards.
func (r *docRenderer) render(head peers.Document, ps []peers.PeerMetadata, probe func(id string) reachability.Status) []byte {
	head.Peers = []peers.PeerEntry{}
	compact, err := json.Marshal(head)
	if err != nil {
		panic(fmt.Sprintf("encoding the peers document: %v", err)) // plain structs: cannot fail
	}
	h := spaced(compact)
	at := bytes.Index(h, emptyPeers)
	if at < 0 {
		panic("encoding the peers document: no peers field")
	}
	size := len(h) + 2
	if len(r.prev) > 0 {
		size += len(r.buf) * len(ps) / len(r.prev)
	} else {
		size += len(ps) * 160
	}
	out := make([]byte, 0, size)
	out = append(out, h[:at+len(emptyPeers)-1]...) // up to and including '['
	spans := make([]span, len(ps))
	probes := make([]reachability.Status, len(ps))
	j := 0
	for i := range ps {
		if probe != nil {
			probes[i] = probe(ps[i].ID())
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n  "...)
		for j < len(r.prev) && peers.CompareID(r.prev[j], ps[i]) < 0 {
			j++
		}
		from := len(out)
		if j < len(r.prev) && r.prev[j] == ps[i] && r.prevProbes[j] == probes[i] {
			out = append(out, r.buf[r.spans[j].from:r.spans[j].to]...)
		} else {
			out = appendEntry(out, ps[i], probes[i])
		}
		spans[i] = span{from, len(out)}
	}
	if len(ps) > 0 {
		out = append(out, '\n')
	}
	out = append(out, h[at+len(emptyPeers)-1:]...) // ']' and the rest
	out = append(out, '\n')
	r.prev, r.prevProbes, r.buf, r.spans = ps, probes, out, spans
	return out
}

// appendEntry appends p as a peers.PeerEntry in JSON, fields in its order, with the
// reachability fields when st says the peer was probed.
func appendEntry(b []byte, p peers.PeerMetadata, st reachability.Status) []byte {
	b = append(b, `{"id": `...)
	b = appendString(b, p.Namespace+"/"+p.Name)
	b = append(b, `, "name": `...)
	b = appendString(b, p.Name)
	b = append(b, `, "namespace": `...)
	b = appendString(b, p.Namespace)
	b = append(b, `, "address": `...)
	b = appendString(b, p.Address)
	b = append(b, `, "port": `...)
	b = strconv.AppendInt(b, int64(p.Port), 10)
	b = append(b, `, "ready": `...)
	b = strconv.AppendBool(b, p.Ready)
	b = append(b, `, "serving": `...)
	b = strconv.AppendBool(b, p.Serving)
	b = append(b, `, "terminating": `...)
	b = strconv.AppendBool(b, p.Terminating)
	if st.Probed {
		b = append(b, `, "reachable": `...)
		b = strconv.AppendBool(b, st.Reachable)
		b = append(b, `, "lastProbe": "`...)
		b = st.LastProbe.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
		if st.Reachable {
			b = append(b, `, "connectSeconds": `...)
			b = appendFloat(b, st.ConnectTime.Seconds())
		} else {
			b = append(b, `, "probeError": `...)
			b = appendString(b, st.Error)
		}
	}
	return append(b, '}')
}

// appendFloat writes f as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendString appends s as a JSON string: as it is when it needs no escaping (names
// and addresses never do), else as encoding/json escapes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// spaced puts a space after every colon and comma of compact JSON that is not
// inside a string.
func spaced(compact []byte) []byte {
	out := make([]byte, 0, len(compact)+len(compact)/8)
	inString, escaped := false, false
	for _, c := range compact {
		out = append(out, c)
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ':' || c == ','):
			out = append(out, ' ')
		}
	}
	return out
}
