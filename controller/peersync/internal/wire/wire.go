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
//	Broadcast: flags (see BroadcastSnapshot and the others), the broadcast's name,
//	         with BroadcastSequenced the frame's sequence number (uvarint), then a
//	         uvarint count and that many messages (uvarint length, bytes; never
//	         empty)
//	Request: the name of a broadcast whose snapshot the dialer asks for; the
//	         listener answers on its own connection to the dialer
//	Resend:  the name of a broadcast, the incarnation (hello nonce) of the replica
//	         asked, and ranges of its frames' sequence numbers (uvarint count,
//	         then from and to, inclusive) that the dialer is missing; the listener
//	         answers on its own connection to the dialer: the frames again, or a
//	         resync when they are no longer held
//
//	listener → dialer, after the hello of a dialer it admitted: the Features line
//	"epp-peer-sync-features <feature> ...\n" (a dialer sends Broadcast and Request
//	frames only to a listener whose features name FeatureBroadcast, sequenced
//	frames and Resend frames only to one that names FeatureBroadcastSeq; one that
//	never sends the line, as the first version, gets State frames only)
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
	frameRequest   byte = 4
	frameResend    byte = 5

	flagFull byte = 1
)

var ErrMalformed = errors.New("malformed frame")

// FeatureBroadcast is the feature of a listener that takes Broadcast and Request
// frames.
const FeatureBroadcast = "broadcast"

// FeatureBroadcastSeq is the feature of a listener that takes sequenced Broadcast
// frames (BroadcastSequenced) and Resend frames: nothing published is lost to a
// connection gap.
const FeatureBroadcastSeq = "broadcast-seq"

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
	TypeRequest   = frameRequest
	TypeResend    = frameResend
)

// Flags of a Broadcast frame.
const (
	BroadcastSnapshot    byte = 1 // the messages are part of a snapshot (or, with BroadcastResync, of a resync)
	BroadcastSnapshotEnd byte = 2 // the snapshot (or resync) is complete after these messages
	BroadcastNotHere     byte = 4 // no snapshot here: ask another peer (with BroadcastCold: the broadcast is here, not warm yet)
	// BroadcastSequenced: the frame carries Seq, its sequence number among the
	// frames its replica published (1, 2, ... for the life of the process).
	BroadcastSequenced byte = 8
	// BroadcastResent: a frame published earlier, sent again because the peer
	// asked for it (Resend); Seq is its own.
	BroadcastResent byte = 16
	// BroadcastResync: with BroadcastSnapshot, part of a resync, which a Resend
	// gets when the frames it asks for are no longer held: what the replica
	// holds, as a snapshot; the end carries the Seq of the last frame published
	// before it began, which it covers.
	BroadcastResync byte = 32
	// BroadcastCursor: no messages; Seq is the last frame published so far (sent
	// when a connection starts, and after frames were skipped for a slow peer), so
	// that a peer can tell what it is missing.
	BroadcastCursor byte = 64
	// BroadcastCold: with BroadcastNotHere, the broadcast is here but not warm
	// yet, so its snapshot would be partial.
	BroadcastCold byte = 128
)

// Broadcast is a decoded Broadcast frame; the messages are subslices of the frame.
type Broadcast struct {
	Flags    byte
	Name     string
	Seq      uint64 // with BroadcastSequenced
	Messages [][]byte
}

// AppendBroadcast encodes a Broadcast frame of the given messages.
func AppendBroadcast(dst []byte, flags byte, name string, msgs [][]byte) []byte {
	return AppendBroadcastSeq(dst, flags&^BroadcastSequenced, name, 0, msgs)
}

// AppendBroadcastSeq encodes a Broadcast frame of the given messages; with
// BroadcastSequenced in flags, it carries seq.
func AppendBroadcastSeq(dst []byte, flags byte, name string, seq uint64, msgs [][]byte) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameBroadcast)
		e.byte(flags)
		e.string(name)
		if flags&BroadcastSequenced != 0 {
			e.uvarint(seq)
		}
		e.uvarint(uint64(len(msgs)))
		for _, m := range msgs {
			e.bytes(m)
		}
	})
}

// ParseBroadcastInto decodes a Broadcast frame's body into b, reusing its slice.
// Names are at most lim.MaxNameBytes, messages at most lim.MaxValueBytes and never
// empty (an empty message carries nothing, and costs the reader as much as any).
func ParseBroadcastInto(b *Broadcast, body []byte, lim Limits) error {
	d := decoder{b: body}
	*b = Broadcast{Messages: b.Messages[:0]}
	if d.byte() != frameBroadcast {
		return ErrMalformed
	}
	b.Flags = d.byte()
	name := d.bytes()
	if len(name) > lim.MaxNameBytes || len(name) == 0 {
		d.fail()
	}
	if b.Flags&BroadcastSequenced != 0 {
		b.Seq = d.uvarint()
	}
	// Every message takes at least two bytes (a length and one byte).
	n := d.uvarint()
	if n > uint64(len(d.b))/2 {
		d.fail()
	}
	for range n {
		m := d.bytes()
		if len(m) > lim.MaxValueBytes || len(m) == 0 {
			d.fail()
			break
		}
		b.Messages = append(b.Messages, m)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		*b = Broadcast{Messages: b.Messages[:0]}
		return d.err
	}
	b.Name = string(name)
	return nil
}

// SetResent returns a copy of the encoded Broadcast frame f (as AppendBroadcastSeq
// writes it) marked BroadcastResent.
func SetResent(f []byte) []byte {
	out := append([]byte(nil), f...)
	_, k := binary.Uvarint(out) // the frame's length; the type byte, then the flags
	if k > 0 && len(out) > k+1 {
		out[k+1] |= BroadcastResent
	}
	return out
}

// SeqRange is the sequence numbers From to To, both included.
type SeqRange struct{ From, To uint64 }

// Resend is a decoded Resend frame.
type Resend struct {
	Name string
	// Incarnation is the hello nonce of the replica asked: a replica that
	// restarted meanwhile numbers its frames anew and ignores the request.
	Incarnation uint64
	Ranges      []SeqRange
}

// MaxResendRanges bounds the ranges of one Resend frame.
const MaxResendRanges = 64

// AppendResend encodes a Resend frame.
func AppendResend(dst []byte, r Resend) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameResend)
		e.string(r.Name)
		e.b = binary.LittleEndian.AppendUint64(e.b, r.Incarnation)
		e.uvarint(uint64(len(r.Ranges)))
		for _, g := range r.Ranges {
			e.uvarint(g.From)
			e.uvarint(g.To)
		}
	})
}

// ParseResend decodes a Resend frame's body: at most MaxResendRanges ranges, each
// with From ≥ 1 and To ≥ From.
func ParseResend(body []byte, lim Limits) (Resend, error) {
	d := decoder{b: body}
	if d.byte() != frameResend {
		return Resend{}, ErrMalformed
	}
	var r Resend
	name := d.bytes()
	if len(name) > lim.MaxNameBytes || len(name) == 0 {
		d.fail()
	}
	r.Incarnation = d.fixed64()
	n := d.count()
	if n > MaxResendRanges {
		d.fail()
	}
	for range n {
		g := SeqRange{From: d.uvarint(), To: d.uvarint()}
		if g.From == 0 || g.To < g.From {
			d.fail()
			break
		}
		r.Ranges = append(r.Ranges, g)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return Resend{}, d.err
	}
	r.Name = string(name)
	return r, nil
}

// AppendRequest encodes a Request frame for the snapshot of broadcast name.
func AppendRequest(dst []byte, name string) []byte {
	return frame(dst, func(e *encoder) {
		e.byte(frameRequest)
		e.string(name)
	})
}

// ParseRequest decodes a Request frame's body.
func ParseRequest(body []byte, lim Limits) (string, error) {
	d := decoder{b: body}
	if d.byte() != frameRequest {
		return "", ErrMalformed
	}
	name := d.bytes()
	if len(name) > lim.MaxNameBytes || len(name) == 0 || len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return "", d.err
	}
	return string(name), nil
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
