package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The wire format, over one TCP connection (TLS optional) from the replica that
// pushes to the peer that listens:
//
//	listener → dialer: the banner line "epp-peer-discovery <namespace>/<name>\n"
//	                   (reachability.AnswerLine, what probes are answered too)
//	dialer → listener: the Preface "EPPSYNC1", then frames
//	frame:   uvarint length, then that many bytes: a type byte and its body
//	Hello:   version, namespace, name, start (unix ns), nonce (8 bytes)
//	State:   flags (1 = full), seq, then four sections, each a uvarint count:
//	         keys    {index, name, Codec, Field count, {name, kind}}
//	         entries {index, key index, endpoint}
//	         values  {index delta, length, bytes}   ascending index
//	         deletes {index delta}                  ascending index
//
//	Broadcast: flags (BroadcastDirect), the broadcast's name, then a uvarint count
//	         and that many messages (uvarint length, bytes; at least
//	         MinBroadcastMessageBytes each)
//
//	listener → dialer, after the hello of a dialer it admitted: the Features line
//	"epp-peer-sync-features <feature> ...\n" (a dialer sends Broadcast frames only
//	to a listener whose features name FeatureExchange; one that never sends the
//	line, as the first version, gets State frames only, and so does one of the
//	version that kept a log of its broadcasts, which names "broadcast" and
//	"broadcast-seq" instead)
//
// Indexes are the pusher's, for the life of its process: a key or an entry (a key
// and an endpoint) is defined once per connection, in the full State that starts it
// or in the first delta after it appears, and referred to by index afterwards. A
// full State carries every live key, entry and value; a delta only what changed
// since the last frame, and an empty delta is the heartbeat. Frames are sent once
// per interval; TCP keeps them in order, and a connection that loses one is closed
// and starts again with a full State.
const (
	Preface = "EPPSYNC1"
	Version = 1

	// MaxHelloBytes bounds a Hello's frame: a namespace and a name (at most 63 and
	// 253 bytes in Kubernetes), four numbers.
	MaxHelloBytes = 512

	frameHello     byte = 1
	frameState     byte = 2
	frameBroadcast byte = 3

	flagFull byte = 1
)

var ErrMalformed = errors.New("malformed frame")

// FeatureExchange is the feature of a listener that takes Broadcast frames, those
// published to every peer and those sent to it alone (BroadcastDirect). The
// listeners of the version before named "broadcast" and "broadcast-seq", and took
// frames of another form (numbered, and requests of snapshots and resends): a
// dialer of this version sends them none, and they send none to a listener of it.
const FeatureExchange = "broadcast-exchange"

// FeaturesLine is the line a listener writes after the hello of a dialer it
// admitted, naming what it takes besides State frames.
func FeaturesLine(features ...string) string {
	return "epp-peer-sync-features " + strings.Join(features, " ") + "\n"
}

// ParseFeaturesLine returns the features of a FeaturesLine (ok false for another
// line).
func ParseFeaturesLine(line string) (features []string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "epp-peer-sync-features ")
	if !ok {
		return nil, false
	}
	return strings.Fields(rest), true
}

// FrameType is the type byte of a frame's body (0 for an empty body).
func FrameType(body []byte) byte {
	if len(body) == 0 {
		return 0
	}
	return body[0]
}

// Frame types, as FrameType returns them.
const (
	TypeState     = frameState
	TypeBroadcast = frameBroadcast
)

// Flags of a Broadcast frame.
const (
	// BroadcastDirect: the messages are for the listener alone (Broadcast.SendTo):
	// a request of the dialer's, or its answer to one of the listener's; without
	// it, they were published to every peer.
	BroadcastDirect byte = 1
)

// MinBroadcastMessageBytes is the smallest message a Broadcast frame may carry: a
// smaller one carries nothing a consumer could use, and a frame of them would cost
// its reader more than its bytes.
const MinBroadcastMessageBytes = 4

// Broadcast is a decoded Broadcast frame. Its messages are read in place, one at a
// time (Next), so that a frame costs its reader no allocation per message.
type Broadcast struct {
	Flags byte
	Name  string
	// Count is the frame's number of messages.
	Count int
	rest  []byte
}

// Next returns the next message (a subslice of the frame), and false after the
// last one. The frame was checked whole when it was parsed.
func (b *Broadcast) Next() ([]byte, bool) {
	if len(b.rest) == 0 {
		return nil, false
	}
	n, k := binary.Uvarint(b.rest)
	m := b.rest[k : k+int(n) : k+int(n)]
	b.rest = b.rest[k+int(n):]
	return m, true
}

// AppendBroadcast encodes a Broadcast frame of the given messages.
func AppendBroadcast(dst []byte, flags byte, name string, msgs [][]byte) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameBroadcast)
		e.byte(flags)
		e.string(name)
		e.uvarint(uint64(len(msgs)))
		for _, m := range msgs {
			e.bytes(m)
		}
	})
}

// ParseBroadcastInto decodes a Broadcast frame's body into b, checking every
// message without copying it: names are 1 to lim.MaxNameBytes, messages
// MinBroadcastMessageBytes to lim.MaxValueBytes, flags known ones only.
func ParseBroadcastInto(b *Broadcast, body []byte, lim Limits) error {
	d := decoder{b: body}
	*b = Broadcast{}
	if d.byte() != frameBroadcast {
		return ErrMalformed
	}
	b.Flags = d.byte()
	if b.Flags&^BroadcastDirect != 0 {
		d.fail()
	}
	name := d.bytes()
	if len(name) > lim.MaxNameBytes || len(name) == 0 {
		d.fail()
	}
	n := d.uvarint()
	if n > uint64(len(d.b))/(MinBroadcastMessageBytes+1) {
		d.fail()
	}
	rest := d.b
	for range n {
		m := d.bytes()
		if len(m) > lim.MaxValueBytes || len(m) < MinBroadcastMessageBytes {
			d.fail()
			break
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		*b = Broadcast{}
		return d.err
	}
	b.Name, b.Count, b.rest = string(name), int(n), rest
	return nil
}

// encoder appends the wire's primitives to a byte slice.
type encoder struct{ b []byte }

func (e *encoder) byte(x byte)      { e.b = append(e.b, x) }
func (e *encoder) uvarint(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *encoder) string(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *encoder) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

// frame wraps the body built by fill in a frame (length first).
func frame(dst []byte, fill func(e *encoder)) []byte {
	e := encoder{b: make([]byte, 0, 64)}
	fill(&e)
	dst = binary.AppendUvarint(dst, uint64(len(e.b)))
	return append(dst, e.b...)
}

// decoder reads the wire's primitives; the first error sticks and later reads
// return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrMalformed
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	x := d.b[0]
	d.b = d.b[1:]
	return x
}

func (d *decoder) uvarint() uint64 {
	if len(d.b) > 0 && d.b[0] < 0x80 { // one byte: most of them
		x := d.b[0]
		d.b = d.b[1:]
		return uint64(x)
	}
	return d.uvarintSlow()
}

func (d *decoder) uvarintSlow() uint64 {
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return x
}

// count reads a section's length, which can be no greater than the bytes left
// (every item takes at least one), so that a hostile count allocates nothing.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

// bytes returns the next length-prefixed bytes, a subslice of the frame.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) fixed64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	x := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return x
}

// Hello opens a connection: who pushes, and which run of its process.
type Hello struct {
	Version   uint64
	Namespace string
	Name      string
	Start     uint64 // the process's start, unix nanoseconds: a later start is a newer incarnation
	Nonce     uint64 // random per process, for two starts in one nanosecond
}

func (h Hello) ID() string { return h.Namespace + "/" + h.Name }

func AppendHello(dst []byte, h Hello) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameHello)
		e.uvarint(h.Version)
		e.string(h.Namespace)
		e.string(h.Name)
		e.uvarint(h.Start)
		e.b = binary.LittleEndian.AppendUint64(e.b, h.Nonce)
	})
}

func ParseHello(body []byte) (Hello, error) {
	d := decoder{b: body}
	if d.byte() != frameHello {
		return Hello{}, fmt.Errorf("%w: want Hello first", ErrMalformed)
	}
	h := Hello{Version: d.uvarint(), Namespace: d.string(), Name: d.string(), Start: d.uvarint(), Nonce: d.fixed64()}
	if d.err != nil {
		return Hello{}, d.err
	}
	if h.Version != Version {
		return Hello{}, fmt.Errorf("%w: wire version %d, this replica speaks %d", ErrMalformed, h.Version, Version)
	}
	if h.Name == "" {
		return Hello{}, fmt.Errorf("%w: Hello without a name", ErrMalformed)
	}
	return h, nil
}

// State is a decoded State frame. Values and deletes refer to entries by index;
// the bytes of values are subslices of the frame.
type State struct {
	Full    bool
	Seq     uint64
	Keys    []KeyDef
	Entries []EntryDef
	Values  []ValueDef
	Deletes []uint64
}

type KeyDef struct {
	Index  uint64
	Name   string
	Codec  byte
	Fields []Field
}

type EntryDef struct {
	Index    uint64
	Key      uint64
	Endpoint string
}

type ValueDef struct {
	Entry uint64
	Data  []byte
}

// Limits bound what a peer can make this replica hold or decode.
type Limits struct {
	MaxValueBytes int
	MaxNameBytes  int
}

// ErrValueTooLarge marks a State frame that carried values over the limit; the
// rest of the frame was decoded (those values are left out).
var ErrValueTooLarge = errors.New("value over the size limit")

func ParseState(body []byte, lim Limits) (State, int, error) {
	var s State
	n, err := ParseStateInto(&s, body, lim)
	if err != nil && !errors.Is(err, ErrValueTooLarge) {
		return State{}, 0, err
	}
	return s, n, err
}

// ParseStateInto is ParseState into s, reusing its slices (a connection parses
// every message into one State: no allocation per message once they are large
// enough). The values' bytes are subslices of body.
func ParseStateInto(s *State, body []byte, lim Limits) (int, error) {
	d := decoder{b: body}
	*s = State{Keys: s.Keys[:0], Entries: s.Entries[:0], Values: s.Values[:0], Deletes: s.Deletes[:0]}
	if d.byte() != frameState {
		return 0, ErrMalformed
	}
	s.Full = d.byte()&flagFull != 0
	s.Seq = d.uvarint()
	name := func() string {
		b := d.bytes()
		if len(b) > lim.MaxNameBytes {
			d.fail()
			return ""
		}
		return string(b)
	}
	n := d.count()
	for range n {
		k := KeyDef{Index: d.uvarint(), Name: name(), Codec: d.byte()}
		nf := d.count()
		if nf > 0 {
			k.Fields = make([]Field, 0, nf)
		}
		for range nf {
			k.Fields = append(k.Fields, Field{Name: name(), Kind: d.byte()})
		}
		if k.Codec != CodecFields && k.Codec != CodecBinary && k.Codec != CodecJSON {
			d.fail()
		}
		s.Keys = append(s.Keys, k)
	}
	n = d.count()
	s.Entries = slices.Grow(s.Entries, n)
	for range n {
		s.Entries = append(s.Entries, EntryDef{Index: d.uvarint(), Key: d.uvarint(), Endpoint: name()})
	}
	n = d.count()
	s.Values = slices.Grow(s.Values, n)
	var idx uint64
	tooLarge := 0
	for i := range n {
		delta := d.uvarint()
		if i > 0 && delta == 0 {
			d.fail() // ascending, each entry once
		}
		idx += delta
		data := d.bytes()
		if len(data) > lim.MaxValueBytes {
			tooLarge++
			continue
		}
		s.Values = append(s.Values, ValueDef{Entry: idx, Data: data})
	}
	n = d.count()
	s.Deletes = slices.Grow(s.Deletes, n)
	idx = 0
	for i := range n {
		delta := d.uvarint()
		if i > 0 && delta == 0 {
			d.fail()
		}
		idx += delta
		s.Deletes = append(s.Deletes, idx)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail() // trailing bytes
	}
	if d.err != nil {
		*s = State{Keys: s.Keys[:0], Entries: s.Entries[:0], Values: s.Values[:0], Deletes: s.Deletes[:0]}
		return 0, d.err
	}
	if tooLarge > 0 {
		return tooLarge, ErrValueTooLarge
	}
	return 0, nil
}

// AppendState encodes s as a frame. Values and deletes must be in ascending entry
// order.
func AppendState(dst []byte, s *State) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameState)
		var flags byte
		if s.Full {
			flags |= flagFull
		}
		e.byte(flags)
		e.uvarint(s.Seq)
		e.uvarint(uint64(len(s.Keys)))
		for _, k := range s.Keys {
			e.uvarint(k.Index)
			e.string(k.Name)
			e.byte(k.Codec)
			e.uvarint(uint64(len(k.Fields)))
			for _, f := range k.Fields {
				e.string(f.Name)
				e.byte(f.Kind)
			}
		}
		e.uvarint(uint64(len(s.Entries)))
		for _, en := range s.Entries {
			e.uvarint(en.Index)
			e.uvarint(en.Key)
			e.string(en.Endpoint)
		}
		e.uvarint(uint64(len(s.Values)))
		var last uint64
		for _, v := range s.Values {
			e.uvarint(v.Entry - last)
			last = v.Entry
			e.bytes(v.Data)
		}
		e.uvarint(uint64(len(s.Deletes)))
		last = 0
		for _, idx := range s.Deletes {
			e.uvarint(idx - last)
			last = idx
		}
	})
}

// ErrFrameTooLarge is a frame whose length is over the limit: the connection ends
// before it is read.
var ErrFrameTooLarge = errors.New("frame over the size limit")

// FrameReader is what frames are read from: a bufio.Reader, or a reader of single
// bytes where nothing past the frame may be consumed.
type FrameReader interface {
	io.Reader
	io.ByteReader
}

// ReadFrame reads one frame's body (at most max bytes).
func ReadFrame(r FrameReader, max int) ([]byte, error) {
	return ReadFrameInto(r, max, nil)
}

// ReadFrameInto is ReadFrame into buf's storage where it is large enough.
func ReadFrameInto(r FrameReader, max int, buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrFrameTooLarge, n, max)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	body := buf[:0]
	if uint64(cap(body)) < n {
		body = make([]byte, n)
	}
	body = body[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}
