package wire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
)

// load is shaped like llm-d-router's concurrency.InFlightLoad.
type load struct {
	Requests int64
	Tokens   int64
}

// loadV2 is a later version of load, with a Field added and one of another width.
type loadV2 struct {
	Requests int32
	Tokens   int64
	Queued   uint16
	Label    string
	Ratio    float64
	Hot      bool
}

// roundTrip encodes v with its Codec, as a peer does, and decodes it as a value of
// local's type, as the receiver does.
func roundTrip(t *testing.T, v, local any) any {
	t.Helper()
	c := CodecFor(reflect.TypeOf(v))
	b, err := c.Encode(nil, v)
	if err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	rk := &RemoteKey{Name: "k", Kind: c.Kind, Fields: c.Fields}
	lc := CodecFor(reflect.TypeOf(local))
	got, err := rk.PlanFor(lc).Decode(rk, b)
	if err != nil {
		t.Fatalf("decode %#v as %T: %v", v, local, err)
	}
	return got
}

func TestFieldsCodecDecodesAsTheLocalType(t *testing.T) {
	got := roundTrip(t, &load{Requests: 3, Tokens: -1200}, &load{})
	if l, ok := got.(*load); !ok || *l != (load{Requests: 3, Tokens: -1200}) {
		t.Fatalf("got %#v, want *load{3, -1200} (an aggregate's type assertion must hold)", got)
	}
	if c := CodecFor(reflect.TypeOf(&load{})); c.Kind != CodecFields {
		t.Fatalf("a struct of integers is encoded as %s, want fields", CodecName(c.Kind))
	}
	// A struct value (not a pointer) stays a struct value.
	if got := roundTrip(t, load{Requests: 1}, load{}); got != (load{Requests: 1}) {
		t.Fatalf("got %#v", got)
	}
}

func TestFieldsCodecAcrossVersions(t *testing.T) {
	// A newer peer's value, read by an older replica: the fields both know.
	got := roundTrip(t, &loadV2{Requests: 7, Tokens: 9, Queued: 4, Label: "x", Ratio: 0.5, Hot: true}, &load{})
	if l := got.(*load); *l != (load{Requests: 7, Tokens: 9}) {
		t.Fatalf("newer → older: got %#v", l)
	}
	// An older peer's value, read by a newer replica: the added fields are zero.
	got = roundTrip(t, &load{Requests: 2, Tokens: 5}, &loadV2{})
	if l := got.(*loadV2); *l != (loadV2{Requests: 2, Tokens: 5}) {
		t.Fatalf("older → newer: got %#v", l)
	}
	// Out of the local Field's range: left zero, never wrapped.
	got = roundTrip(t, &load{Requests: 1 << 40, Tokens: 1}, &loadV2{})
	if l := got.(*loadV2); l.Requests != 0 || l.Tokens != 1 {
		t.Fatalf("a value out of an int32's range became %d", l.Requests)
	}
	got = roundTrip(t, &loadV2{Label: "héllo", Ratio: -2.25, Hot: true}, &loadV2{})
	if l := got.(*loadV2); l.Label != "héllo" || l.Ratio != -2.25 || !l.Hot {
		t.Fatalf("got %#v", l)
	}
}

// counter has its own binary encoding.
type counter struct{ n int }

func (c counter) MarshalBinary() ([]byte, error) { return []byte(strconv.Itoa(c.n)), nil }
func (c *counter) UnmarshalBinary(b []byte) error {
	n, err := strconv.Atoi(string(b))
	c.n = n
	return err
}

func TestBinaryAndJSONCodecs(t *testing.T) {
	if c := CodecFor(reflect.TypeOf(counter{})); c.Kind != CodecBinary {
		t.Fatalf("a BinaryMarshaler is encoded as %s", CodecName(c.Kind))
	}
	if got := roundTrip(t, counter{n: 42}, counter{}); got != (counter{n: 42}) {
		t.Fatalf("got %#v", got)
	}
	m := map[string]int{"a": 1, "b": 2}
	if c := CodecFor(reflect.TypeOf(m)); c.Kind != CodecJSON {
		t.Fatalf("a map is encoded as %s, want json", CodecName(c.Kind))
	}
	got := roundTrip(t, m, map[string]int{})
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("got %#v", got)
	}
	type nested struct {
		Load  load
		Names []string
	}
	if c := CodecFor(reflect.TypeOf(&nested{})); c.Kind != CodecJSON {
		t.Fatalf("a struct with a nested struct is encoded as %s, want json", CodecName(c.Kind))
	}
	got = roundTrip(t, &nested{Load: load{Requests: 1}, Names: []string{"x"}}, &nested{})
	if n := got.(*nested); n.Load.Requests != 1 || len(n.Names) != 1 {
		t.Fatalf("got %#v", n)
	}
}

func TestDecodeRefusesWhatDoesNotFit(t *testing.T) {
	rk := &RemoteKey{Name: "k", Kind: CodecJSON}
	if _, err := rk.PlanFor(CodecFor(reflect.TypeOf(&load{}))).Decode(rk, []byte(`{}`)); err == nil {
		t.Fatal("a JSON value decoded into a fields-encoded local type")
	}
	c := CodecFor(reflect.TypeOf(&load{}))
	fk := &RemoteKey{Name: "k", Kind: c.Kind, Fields: c.Fields}
	for _, b := range [][]byte{nil, {0x80}, {2}} {
		if _, err := fk.PlanFor(c).Decode(fk, b); err == nil {
			t.Errorf("decoded the truncated value %x", b)
		}
	}
	var bad json.Marshaler = badJSON{}
	if _, err := CodecFor(reflect.TypeOf(bad)).Encode(nil, bad); err == nil {
		t.Fatal("an unmarshalable value encoded")
	}
	if _, err := c.Encode(nil, (*load)(nil)); err == nil {
		t.Fatal("a nil pointer encoded")
	}
}

type badJSON struct{}

func (badJSON) MarshalJSON() ([]byte, error) { return nil, strconv.ErrSyntax }

// FuzzDecodeValue: a peer's bytes, whatever they are, decode into the local type or
// fail; never panic.
func FuzzDecodeValue(f *testing.F) {
	c := CodecFor(reflect.TypeOf(&loadV2{}))
	b, _ := c.Encode(nil, &loadV2{Requests: 3, Tokens: 4, Queued: 5, Label: "x", Ratio: 1.5, Hot: true})
	f.Add(b)
	f.Add([]byte{})
	rk := &RemoteKey{Name: "k", Kind: c.Kind, Fields: c.Fields}
	older := CodecFor(reflect.TypeOf(&load{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = rk.PlanFor(c).Decode(rk, b)
		_, _ = rk.PlanFor(older).Decode(rk, b)
	})
}
