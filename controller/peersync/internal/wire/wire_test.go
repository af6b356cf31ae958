package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

var testLimits = Limits{MaxValueBytes: 64, MaxNameBytes: 4096}

func sampleState() *State {
	return &State{
		Full: true, Seq: 9,
		Keys:    []KeyDef{{Index: 1, Name: "inflight:p", Codec: CodecFields, Fields: []Field{{"Requests", KindInt}, {"Tokens", KindInt}}}},
		Entries: []EntryDef{{Index: 1, Key: 1, Endpoint: "ns/vllm-0"}, {Index: 3, Key: 1, Endpoint: "ns/vllm-1"}},
		Values:  []ValueDef{{Entry: 1, Data: []byte{2, 4}}, {Entry: 3, Data: []byte{6, 8}}},
		Deletes: []uint64{2, 7},
	}
}

func TestStateRoundTrip(t *testing.T) {
	want := sampleState()
	b := AppendState(nil, want)
	body, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ParseState(body, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, *want)
	}
	h := Hello{Version: Version, Namespace: "ns", Name: "epp-0", Start: 12345, Nonce: 99}
	body, err = ReadFrame(bufio.NewReader(bytes.NewReader(AppendHello(nil, h))), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if gh, err := ParseHello(body); err != nil || gh != h {
		t.Fatalf("Hello: %+v %v", gh, err)
	}
}

func TestDeltaCostsAFewBytesPerValue(t *testing.T) {
	// 1,000 endpoints' in-flight loads changed: index delta, length, two varints.
	s := &State{Seq: 1000}
	for i := range 1000 {
		s.Values = append(s.Values, ValueDef{Entry: uint64(i + 1), Data: []byte{byte(i % 50 * 2), 0x90, 0x03}})
	}
	b := AppendState(nil, s)
	if per := float64(len(b)) / 1000; per > 8 {
		t.Fatalf("a delta of 1,000 changed values takes %.1f bytes per value, want at most 8", per)
	}
}

func TestParseStateRefusesBadInput(t *testing.T) {
	good := AppendState(nil, sampleState())
	_, n := binary.Uvarint(good)
	body := good[n:]
	cases := map[string][]byte{
		"empty":           {},
		"Hello type":      {frameHello},
		"truncated":       body[:len(body)-1],
		"trailing bytes":  append(append([]byte{}, body...), 0),
		"huge count":      {frameState, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unknown Codec":   appendBody(&State{Keys: []KeyDef{{Index: 1, Name: "k", Codec: 9}}}),
		"values unsorted": appendBody(&State{Values: []ValueDef{{Entry: 2, Data: []byte{1}}, {Entry: 2, Data: []byte{1}}}}),
	}
	for name, b := range cases {
		if _, _, err := ParseState(b, testLimits); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// A value over the limit is left out and counted; the rest is kept.
	big := appendBody(&State{Values: []ValueDef{{Entry: 1, Data: make([]byte, 65)}, {Entry: 2, Data: []byte{1}}}})
	st, tooLarge, err := ParseState(big, testLimits)
	if !errors.Is(err, ErrValueTooLarge) || tooLarge != 1 || len(st.Values) != 1 || st.Values[0].Entry != 2 {
		t.Fatalf("an oversized value: %v, %d over, kept %+v", err, tooLarge, st.Values)
	}
	// A frame longer than the limit is refused before it is read.
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(binary.AppendUvarint(nil, 1<<30))), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a 1 GiB frame: %v", err)
	}
}

func appendBody(s *State) []byte {
	b := AppendState(nil, s)
	_, n := binary.Uvarint(b)
	return b[n:]
}

// FuzzParseState: any bytes either fail to parse or parse into a State that
// encodes back to the same bytes; nothing panics or allocates beyond the input.
func FuzzParseState(f *testing.F) {
	f.Add(appendBody(sampleState()))
	f.Add(appendBody(&State{Seq: 1}))
	f.Add([]byte{frameState, 1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		st, _, err := ParseState(body, Limits{MaxValueBytes: 1 << 20, MaxNameBytes: 4096})
		if err != nil {
			return
		}
		again := appendBody(&st)
		st2, _, err := ParseState(again, Limits{MaxValueBytes: 1 << 20, MaxNameBytes: 4096})
		if err != nil || !reflect.DeepEqual(st, st2) {
			t.Fatalf("re-encoded State does not parse the same: %v", err)
		}
	})
}

func frameBody(b []byte) []byte {
	_, n := binary.Uvarint(b)
	return b[n:]
}

// TestBroadcastAndRequestRoundTrip: what AppendBroadcast, AppendBroadcastSeq,
// AppendRequest and AppendResend write parses back; names and messages over their
// limits, and empty messages, are refused.
func TestBroadcastAndRequestRoundTrip(t *testing.T) {
	lim := Limits{MaxValueBytes: 8, MaxNameBytes: 16}
	msgs := [][]byte{[]byte("a"), []byte("12345678")}
	var b Broadcast
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, BroadcastSnapshot, "index", msgs)), lim); err != nil {
		t.Fatal(err)
	}
	if b.Flags != BroadcastSnapshot || b.Name != "index" || !reflect.DeepEqual(b.Messages, msgs) {
		t.Fatalf("round trip: %+v", b)
	}
	f := AppendBroadcastSeq(nil, BroadcastSequenced, "index", 1<<40, msgs)
	if err := ParseBroadcastInto(&b, frameBody(f), lim); err != nil || b.Seq != 1<<40 || b.Flags != BroadcastSequenced || !reflect.DeepEqual(b.Messages, msgs) {
		t.Fatalf("sequenced round trip: %+v %v", b, err)
	}
	if err := ParseBroadcastInto(&b, frameBody(SetResent(f)), lim); err != nil || b.Flags != BroadcastSequenced|BroadcastResent || b.Seq != 1<<40 {
		t.Fatalf("resent: %+v %v", b, err)
	}
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, 0, "index", [][]byte{[]byte("123456789")})), lim); err == nil {
		t.Error("a message over the limit parsed")
	}
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, 0, "index", [][]byte{[]byte("a"), {}})), lim); err == nil {
		t.Error("an empty message parsed")
	}
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, 0, "a-name-of-17-byte", nil)), lim); err == nil {
		t.Error("a name over the limit parsed")
	}
	name, err := ParseRequest(frameBody(AppendRequest(nil, "index")), lim)
	if err != nil || name != "index" {
		t.Fatalf("request round trip: %q %v", name, err)
	}
	r := Resend{Name: "index", Incarnation: 42, Ranges: []SeqRange{{1, 3}, {7, 7}}}
	if got, err := ParseResend(frameBody(AppendResend(nil, r)), lim); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("resend round trip: %+v %v", got, err)
	}
	for _, bad := range []Resend{{Name: "index", Ranges: []SeqRange{{0, 3}}}, {Name: "index", Ranges: []SeqRange{{4, 3}}}, {Name: "index", Ranges: make([]SeqRange, MaxResendRanges+1)}} {
		if _, err := ParseResend(frameBody(AppendResend(nil, bad)), lim); err == nil {
			t.Errorf("resend %+v parsed", bad)
		}
	}
	if fs, ok := ParseFeaturesLine(FeaturesLine(FeatureBroadcast, "next")); !ok || !reflect.DeepEqual(fs, []string{FeatureBroadcast, "next"}) {
		t.Errorf("features line: %v %v", fs, ok)
	}
}

// TestEmptyMessagesCostNothing: a frame that claims millions of messages in a few
// bytes is refused before anything is allocated for them (a 4 MiB frame of empty
// messages cost 2.8 s of CPU and 1 GiB of allocations before).
func TestEmptyMessagesCostNothing(t *testing.T) {
	lim := Limits{MaxValueBytes: 1 << 16, MaxNameBytes: 64}
	body := frameBody(AppendBroadcast(nil, 0, "index", nil))
	body = append(body[:len(body)-1], binary.AppendUvarint(nil, 4<<20)...)
	body = append(body, make([]byte, 4<<20)...)
	var b Broadcast
	allocs := testing.AllocsPerRun(3, func() {
		if err := ParseBroadcastInto(&b, body, lim); err == nil {
			t.Fatal("a frame of empty messages parsed")
		}
	})
	if allocs > 2 {
		t.Errorf("%v allocations to refuse a frame of empty messages", allocs)
	}
}

// FuzzParseBroadcast: any bytes either fail to parse as a Broadcast, a Request or
// a Resend, or parse into one that encodes back to the same value; nothing panics.
func FuzzParseBroadcast(f *testing.F) {
	f.Add(frameBody(AppendBroadcast(nil, BroadcastSnapshot|BroadcastSnapshotEnd, "index", [][]byte{[]byte("x"), []byte("yz")})))
	f.Add(frameBody(AppendBroadcastSeq(nil, BroadcastSequenced|BroadcastCursor, "index", 300, nil)))
	f.Add(frameBody(AppendRequest(nil, "index")))
	f.Add(frameBody(AppendResend(nil, Resend{Name: "index", Incarnation: 9, Ranges: []SeqRange{{2, 5}}})))
	f.Add([]byte{frameBroadcast, 0, 1, 'a', 1, 0})
	lim := Limits{MaxValueBytes: 1 << 16, MaxNameBytes: 64}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b Broadcast
		if err := ParseBroadcastInto(&b, body, lim); err == nil {
			var again Broadcast
			if err := ParseBroadcastInto(&again, frameBody(AppendBroadcastSeq(nil, b.Flags, b.Name, b.Seq, b.Messages)), lim); err != nil || !reflect.DeepEqual(normalize(b), normalize(again)) {
				t.Fatalf("re-encoded Broadcast does not parse the same: %v", err)
			}
			for _, m := range b.Messages {
				if len(m) == 0 {
					t.Fatal("an empty message parsed")
				}
			}
		}
		if name, err := ParseRequest(body, lim); err == nil {
			if again, err := ParseRequest(frameBody(AppendRequest(nil, name)), lim); err != nil || again != name {
				t.Fatalf("re-encoded Request does not parse the same: %v", err)
			}
		}
		if r, err := ParseResend(body, lim); err == nil {
			if again, err := ParseResend(frameBody(AppendResend(nil, r)), lim); err != nil || !reflect.DeepEqual(again, r) {
				t.Fatalf("re-encoded Resend does not parse the same: %v", err)
			}
		}
	})
}

// normalize makes messages comparable (copies, not subslices of a frame).
func normalize(b Broadcast) Broadcast {
	out := Broadcast{Flags: b.Flags, Name: b.Name, Seq: b.Seq}
	for _, m := range b.Messages {
		out.Messages = append(out.Messages, append([]byte{}, m...))
	}
	return out
}
