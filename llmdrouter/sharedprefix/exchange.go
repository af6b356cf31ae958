package sharedprefix

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
)

// The messages of an exchange (anti-entropy), sent to one peer alone
// (peersync.Broadcast.SendTo), each in one or more parts within the broadcast's
// message limit. A part starts with the message's kind, the exchange's round (8
// bytes, little endian), chosen by the replica that opened it, and a flags byte
// (final: the message's last part). The parts of open, groups and leaves are
// pieces of one JSON body (control), joined before it is read (at most
// maxControlBytes); each part of entries stands alone, in binary:
//
//	open     (opener → peer): the opener's recent leaves, and its roots: per server
//	         of its pool, its capacity (0: not read from the server's metrics
//	         yet, and then its configured one), blocks and digest without those
//	         leaves
//	groups   (peer → opener): notReady, or the peer's recent leaves and, per
//	         server whose root differs, its blocks and the 64 group digests
//	         without either replica's recent leaves (with all of them when either
//	         replica holds none of the server's blocks)
//	leaves   (opener → peer): the opener's recent leaves (again: what changed
//	         since it opened), and per group whose digest differs its 64 leaf
//	         digests
//	entries  (peer → opener) and entries back (opener → peer), in parts, the last
//	         one flagged final: a table of servers (uvarint length, bytes), then
//	         records of a server's leaf and its blocks (hash, 8 bytes, and stamp,
//	         uvarint); the peer sends its blocks of every leaf that differs, the
//	         opener its own blocks of them
//
// Recent leaves are, per server, the leaves that changed within inFlight. A
// control message is checked whole before it is used; entries' every count against
// what the bytes left can hold, before anything is allocated for it.
const (
	msgOpen        byte = 0xA1
	msgGroups      byte = 0xA2
	msgLeaves      byte = 0xA3
	msgEntries     byte = 0xA4
	msgEntriesBack byte = 0xA5
)

// flagFinal is a part's flag: the message's last one.
const flagFinal byte = 1

// headerBytes is a part's kind, round and flags.
const headerBytes = 10

// maxServersPerMessage bounds the servers one message names, and maxControlBytes
// an open, groups or leaves message, its parts joined.
const (
	maxServersPerMessage = 4096
	maxControlBytes      = 16 << 20
)

// control is an open, groups or leaves message.
type control struct {
	NotReady bool             `json:"notReady,omitempty"`
	Recent   map[string][]int `json:"recent,omitempty"`
	Roots    []rootInfo       `json:"roots,omitempty"`
	Groups   []digestVector   `json:"groups,omitempty"`
	Leaves   []digestVector   `json:"leaves,omitempty"`
}

// rootInfo is one server's root, as an open carries it.
type rootInfo struct {
	Server   string `json:"server"`
	Capacity int    `json:"capacity"` // 0: not read from the server's metrics yet (Plugin.statedCapacity)
	// Configured is the opener's configured capacity, which it holds the server at
	// while Capacity is 0.
	Configured int    `json:"configured,omitempty"`
	Blocks     int    `json:"blocks"`
	Digest     uint64 `json:"digest"`
}

// digestVector is 64 digests of a server: its groups (with its blocks), or a
// group's leaves.
type digestVector struct {
	Server  string `json:"server"`
	Blocks  int    `json:"blocks,omitempty"`
	Group   int    `json:"group,omitempty"`
	Digests []byte `json:"digests"` // 64 × 8 bytes, little endian
}

func pack(ds [64]uint64) []byte {
	b := make([]byte, 0, 8*64)
	for _, d := range ds {
		b = binary.LittleEndian.AppendUint64(b, d)
	}
	return b
}

func (v digestVector) digests() (out [64]uint64) {
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(v.Digests[8*i:])
	}
	return out
}

// recentOf is e as a control message carries it, and back.
func recentOf(e excluded) map[string][]int {
	out := map[string][]int{}
	for name, set := range e {
		set.each(func(l int) { out[name] = append(out[name], l) })
	}
	return out
}

func (c *control) recent() excluded {
	out := excluded{}
	for name, ls := range c.Recent {
		set := &leafSet{}
		for _, l := range ls {
			set.add(l)
		}
		out[name] = set
	}
	return out
}

// parseControl decodes a control message strictly, and checks its every bound:
// server names, digests of 64, leaves and groups in range, no server (or group)
// named twice.
func parseControl(body []byte) (*control, error) {
	c := &control{}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return nil, fmt.Errorf("%w: an exchange's message: %w", errMalformedPlacement, err)
	}
	bad := func(what string) (*control, error) {
		return nil, fmt.Errorf("%w: an exchange's message: %s", errMalformedPlacement, what)
	}
	if len(c.Recent)+len(c.Roots)+len(c.Groups) > 3*maxServersPerMessage || len(c.Leaves) > maxServersPerMessage*groupCount {
		return bad("too many servers")
	}
	for name, ls := range c.Recent {
		if len(name) > maxServerIDBytes || len(ls) > leafCount || slices.ContainsFunc(ls, func(l int) bool { return l < 0 || l >= leafCount }) {
			return bad("recent leaves")
		}
	}
	seen := map[string]bool{}
	for _, r := range c.Roots {
		if len(r.Server) == 0 || len(r.Server) > maxServerIDBytes || seen[r.Server] || r.Capacity < 0 || r.Capacity > maxCapacity || r.Configured < 0 || r.Configured > maxCapacity || r.Blocks < 0 || r.Blocks > maxCapacity {
			return bad("a root")
		}
		seen[r.Server] = true
	}
	for i, vs := range [][]digestVector{c.Groups, c.Leaves} {
		seen := map[string]bool{}
		for _, v := range vs {
			k := fmt.Sprint(v.Server, "/", v.Group)
			if len(v.Server) == 0 || len(v.Server) > maxServerIDBytes || len(v.Digests) != 8*64 || v.Group < 0 || v.Group >= groupCount ||
				(i == 0 && v.Group != 0) || v.Blocks < 0 || v.Blocks > maxCapacity || seen[k] {
				return bad("a digest vector")
			}
			seen[k] = true
		}
	}
	return c, nil
}

// leafEntries are a server's blocks in one leaf.
type leafEntries struct {
	server  string
	leaf    int
	entries []entry
}

func header(kind byte, round uint64, flags byte) []byte {
	b := make([]byte, 0, 256)
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint64(b, round)
	return append(b, flags)
}

func appendName(b []byte, name string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// controlParts cuts body (an open, groups or leaves) into parts of at most limit
// bytes, the last one final.
func controlParts(kind byte, round uint64, body []byte, limit int) [][]byte {
	var out [][]byte
	for first := true; first || len(body) > 0; first = false {
		k := min(len(body), limit-headerBytes)
		flags := byte(0)
		if k == len(body) {
			flags = flagFinal
		}
		out = append(out, append(header(kind, round, flags), body[:k]...))
		body = body[k:]
	}
	return out
}

// controlBody is c as a control message's body.
func controlBody(c control) []byte {
	b, _ := json.Marshal(c) // maps, slices and numbers: nothing that fails
	return b
}

// entryParts encodes records into messages of kind of at most limit bytes each,
// the last one flagged final (one message, final, when there are none). A leaf
// whose blocks do not fit one message goes in several records.
func entryParts(kind byte, round uint64, limit int, recs []leafEntries) [][]byte {
	w := &partWriter{kind: kind, round: round, limit: limit}
	w.reset()
	for _, rec := range recs {
		es := rec.entries
		for {
			k, ok := w.room(rec.server)
			if !ok {
				w.flush(false)
				continue
			}
			k = min(k, len(es))
			w.add(rec.server, rec.leaf, es[:k])
			if es = es[k:]; len(es) == 0 {
				break
			}
		}
	}
	w.flush(true)
	return w.out
}

// partWriter builds the parts of entryParts.
type partWriter struct {
	kind      byte
	round     uint64
	limit     int
	names     []string
	idx       map[string]int
	nameBytes int
	body      []byte
	records   int
	out       [][]byte
}

// maxEntryBytes is the most an entry takes: its hash and its stamp.
const maxEntryBytes = 8 + binary.MaxVarintLen64

func (w *partWriter) reset() {
	w.names, w.idx, w.nameBytes, w.body, w.records = nil, map[string]int{}, 0, nil, 0
}

// room is how many entries a record of server can take in this part (ok false:
// none, not even the record; a part with no record takes one whatever).
func (w *partWriter) room(server string) (int, bool) {
	used := headerBytes + 2*binary.MaxVarintLen64 + w.nameBytes + len(w.body)
	if _, ok := w.idx[server]; !ok {
		used += binary.MaxVarintLen64 + len(server)
	}
	used += 3 * binary.MaxVarintLen64 // the record's server, leaf and count
	left := (w.limit - used) / maxEntryBytes
	if left < 1 && w.records > 0 {
		return 0, false
	}
	return max(left, 1), true
}

func (w *partWriter) add(server string, leaf int, es []entry) {
	i, ok := w.idx[server]
	if !ok {
		i = len(w.names)
		w.idx[server] = i
		w.names = append(w.names, server)
		w.nameBytes += binary.MaxVarintLen64 + len(server)
	}
	w.body = binary.AppendUvarint(w.body, uint64(i))
	w.body = binary.AppendUvarint(w.body, uint64(leaf))
	w.body = binary.AppendUvarint(w.body, uint64(len(es)))
	for _, e := range es {
		w.body = binary.LittleEndian.AppendUint64(w.body, uint64(e.hash))
		w.body = binary.AppendUvarint(w.body, e.stamp)
	}
	w.records++
}

func (w *partWriter) flush(final bool) {
	flags := byte(0)
	if final {
		flags = flagFinal
	}
	b := header(w.kind, w.round, flags)
	b = binary.AppendUvarint(b, uint64(len(w.names)))
	for _, n := range w.names {
		b = appendName(b, n)
	}
	b = binary.AppendUvarint(b, uint64(w.records))
	w.out = append(w.out, append(b, w.body...))
	w.reset()
}

// parseEntries reads a part of entries: its records (their entries share one
// slice).
func parseEntries(r *reader) (recs []leafEntries) {
	ns := r.bounded("servers", min(maxServersPerMessage, uint64(len(r.b))/2))
	names := make([]string, 0, ns)
	for i := uint64(0); i < ns && r.fail == ""; i++ {
		names = append(names, string(r.name("server ID", maxServerIDBytes)))
	}
	n := r.bounded("records", uint64(len(r.b))/3)
	var all []entry
	for i := uint64(0); i < n && r.fail == ""; i++ {
		si := r.bounded("server", uint64(max(len(names), 1)-1))
		if r.fail == "" && len(names) == 0 {
			r.fail = "server"
		}
		leaf := int(r.bounded("leaf", leafCount-1))
		count := r.bounded("entries", uint64(len(r.b))/9)
		start := len(all)
		for j := uint64(0); j < count && r.fail == ""; j++ {
			h := blockHash(r.fixed64("hash"))
			s := r.uvarint("stamp")
			all = append(all, entry{hash: h, stamp: s})
		}
		if r.fail == "" {
			recs = append(recs, leafEntries{server: names[si], leaf: leaf, entries: all[start:len(all):len(all)]})
		}
	}
	if r.fail == "" && len(r.b) != 0 {
		r.fail = "trailing bytes"
	}
	return recs
}

// parseHeader reads a part's kind, round and flags, and returns its payload.
func parseHeader(msg []byte) (kind byte, round uint64, flags byte, payload []byte, err error) {
	if len(msg) < headerBytes {
		return 0, 0, 0, nil, fmt.Errorf("%w: an exchange's message of %d bytes", errMalformedPlacement, len(msg))
	}
	return msg[0], binary.LittleEndian.Uint64(msg[1:9]), msg[9], msg[headerBytes:], nil
}
