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

// messagesOf reads b's messages (copies, comparable).
func messagesOf(b *Broadcast) [][]byte {
	var out [][]byte
	for m, ok := b.Next(); ok; m, ok = b.Next() {
		out = append(out, append([]byte{}, m...))
	}
	return out
}

// TestBroadcastRoundTrip: what AppendBroadcast writes parses back, published or
// direct; names and messages over their limits, messages under the least size and
// unknown flags are refused.
func TestBroadcastRoundTrip(t *testing.T) {
	lim := Limits{MaxValueBytes: 8, MaxNameBytes: 16}
	msgs := [][]byte{[]byte("abcd"), []byte("12345678")}
	for _, flags := range []byte{0, BroadcastDirect} {
		var b Broadcast
		if err := ParseBroadcastInto(&b, frameBody(AppendBroadcast(nil, flags, "index", msgs)), lim); err != nil {
			t.Fatal(err)
		}
		if b.Flags != flags || b.Name != "index" || b.Count != 2 || !reflect.DeepEqual(messagesOf(&b), msgs) {
			t.Fatalf("round trip: %+v", b)
		}
	}
	var b Broadcast
	for what, f := range map[string][]byte{
		"a message over the limit":   AppendBroadcast(nil, 0, "index", [][]byte{[]byte("123456789")}),
		"a message under 4 bytes":    AppendBroadcast(nil, 0, "index", [][]byte{[]byte("abcd"), []byte("abc")}),
		"an empty message":           AppendBroadcast(nil, 0, "index", [][]byte{{}}),
		"a name over the limit":      AppendBroadcast(nil, 0, "a-name-of-17-byte", nil),
		"an unknown flag":            AppendBroadcast(nil, 2, "index", msgs),
		"the log version's snapshot": AppendBroadcast(nil, 1|2, "index", msgs),
	} {
		if err := ParseBroadcastInto(&b, frameBody(f), lim); err == nil {
			t.Errorf("%s parsed", what)
		}
	}
	if fs, ok := ParseFeaturesLine(FeaturesLine(FeatureExchange, "next")); !ok || !reflect.DeepEqual(fs, []string{FeatureExchange, "next"}) {
		t.Errorf("features line: %v %v", fs, ok)
	}
}

// TestTinyMessagesCostNothing: a frame that claims millions of messages in a few
// bytes, or carries a million of the least size, is checked with no allocation per
// message (a 4 MiB frame of 1-byte messages cost 1.1 s of CPU and 488 MiB of
// allocations before): the first is refused, the second read in place.
func TestTinyMessagesCostNothing(t *testing.T) {
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
	small := make([][]byte, 800_000)
	for i := range small {
		small[i] = []byte("abcd")
	}
	body = frameBody(AppendBroadcast(nil, 0, "index", small))
	n := 0
	allocs = testing.AllocsPerRun(3, func() {
		if err := ParseBroadcastInto(&b, body, lim); err != nil {
			t.Fatal(err)
		}
		for n = 0; ; n++ {
			if _, ok := b.Next(); !ok {
				break
			}
		}
	})
	if n != len(small) || allocs > 2 {
		t.Errorf("read %d of %d messages with %v allocations, want all with at most 2", n, len(small), allocs)
	}
}

// FuzzParseBroadcast: any bytes either fail to parse as a Broadcast, or parse into
// one that encodes back to the same value, every message of the least size or
// more; nothing panics.
func FuzzParseBroadcast(f *testing.F) {
	f.Add(frameBody(AppendBroadcast(nil, BroadcastDirect, "index", [][]byte{[]byte("xxxx"), []byte("yzyzy")})))
	f.Add(frameBody(AppendBroadcast(nil, 0, "index", nil)))
	f.Add([]byte{frameBroadcast, 0, 1, 'a', 1, 4, 1, 2, 3, 4})
	lim := Limits{MaxValueBytes: 1 << 16, MaxNameBytes: 64}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b Broadcast
		if err := ParseBroadcastInto(&b, body, lim); err != nil {
			return
		}
		msgs := messagesOf(&b)
		if len(msgs) != b.Count {
			t.Fatalf("%d messages read, the frame counts %d", len(msgs), b.Count)
		}
		for _, m := range msgs {
			if len(m) < MinBroadcastMessageBytes {
				t.Fatal("a message under the least size parsed")
			}
		}
		var again Broadcast
		if err := ParseBroadcastInto(&again, frameBody(AppendBroadcast(nil, b.Flags, b.Name, msgs)), lim); err != nil ||
			again.Flags != b.Flags || again.Name != b.Name || !reflect.DeepEqual(messagesOf(&again), msgs) {
			t.Fatalf("re-encoded Broadcast does not parse the same: %v", err)
		}
	})
}
