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

// TestBroadcastAndRequestRoundTrip: what AppendBroadcast and AppendRequest write
// parses back; names and messages over their limits are refused.
func TestBroadcastAndRequestRoundTrip(t *testing.T) {
	lim := Limits{MaxValueBytes: 8, MaxNameBytes: 16}
	msgs := [][]byte{[]byte("a"), []byte("12345678"), {}}
	var b Broadcast
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, BroadcastSnapshot, "index", msgs)), lim); err != nil {
		t.Fatal(err)
	}
	if b.Flags != BroadcastSnapshot || b.Name != "index" || !reflect.DeepEqual(b.Messages, msgs) {
		t.Fatalf("round trip: %+v", b)
	}
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, 0, "index", [][]byte{[]byte("123456789")})), lim); err == nil {
		t.Error("a message over the limit parsed")
	}
	if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, 0, "a-name-of-17-byte", nil)), lim); err == nil {
		t.Error("a name over the limit parsed")
	}
	name, err := ParseRequest(frameBody(AppendRequest(nil, "index")), lim)
	if err != nil || name != "index" {
		t.Fatalf("request round trip: %q %v", name, err)
	}
	if fs, ok := ParseFeaturesLine(FeaturesLine(FeatureBroadcast, "next")); !ok || !reflect.DeepEqual(fs, []string{FeatureBroadcast, "next"}) {
		t.Errorf("features line: %v %v", fs, ok)
	}
}

// FuzzParseBroadcast: any bytes either fail to parse as a Broadcast or a Request, or
// parse into one that encodes back to the same bytes; nothing panics.
func FuzzParseBroadcast(f *testing.F) {
	f.Add(frameBody(AppendBroadcast(nil, BroadcastSnapshot|BroadcastSnapshotEnd, "index", [][]byte{[]byte("x"), nil})))
	f.Add(frameBody(AppendRequest(nil, "index")))
	f.Add([]byte{frameBroadcast, 0, 1, 'a', 1, 0})
	lim := Limits{MaxValueBytes: 1 << 16, MaxNameBytes: 64}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b Broadcast
		if err := ParseBroadcastInto(&b, body, lim); err == nil {
			var again Broadcast
			if err := ParseBroadcastInto(&again, frameBody(AppendBroadcast(nil, b.Flags, b.Name, b.Messages)), lim); err != nil || !reflect.DeepEqual(normalize(b), normalize(again)) {
				t.Fatalf("re-encoded Broadcast does not parse the same: %v", err)
			}
		}
		if name, err := ParseRequest(body, lim); err == nil {
			if again, err := ParseRequest(frameBody(AppendRequest(nil, name)), lim); err != nil || again != name {
				t.Fatalf("re-encoded Request does not parse the same: %v", err)
			}
		}
	})
}

// normalize makes empty messages comparable (nil and empty are the same bytes).
func normalize(b Broadcast) Broadcast {
	out := Broadcast{Flags: b.Flags, Name: b.Name}
	for _, m := range b.Messages {
		out.Messages = append(out.Messages, append([]byte{}, m...))
	}
	return out
}
