package wire

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
)

// How a key's values are encoded, chosen from the Go type of the values this
// replica sets for the key (the same type on every replica that runs the same
// contributor).
const (
	// CodecFields: a struct, or a pointer to one, whose exported fields are all
	// booleans, integers, floats or strings: the fields in the order of the key's
	// schema (sent once per connection), integers as varints. The receiver matches
	// fields by name, so a replica with a newer version of the type (a Field added)
	// and one with an older one understand each other, as with JSON.
	CodecFields byte = 1
	// CodecBinary: a type with encoding.BinaryMarshaler and a pointer with
	// encoding.BinaryUnmarshaler: its own bytes.
	CodecBinary byte = 2
	// CodecJSON: anything else, as encoding/json writes and reads it.
	CodecJSON byte = 3
)

// Field kinds of CodecFields.
const (
	KindBool   byte = 1
	KindInt    byte = 2 // zigzag varint
	KindUint   byte = 3 // varint
	KindFloat  byte = 4 // 8 bytes, IEEE 754, little endian
	KindString byte = 5 // varint length, bytes
)

// Field is one Field of a CodecFields schema.
type Field struct {
	Name string
	Kind byte
}

// Codec encodes and decodes the values of one Go type.
type Codec struct {
	typ    reflect.Type // the values' type, e.g. *concurrency.InFlightLoad
	ptr    bool         // typ is a pointer to a struct
	Kind   byte         // CodecFields, CodecBinary or CodecJSON
	Fields []Field      // CodecFields: the schema
	index  []int        // CodecFields: the struct field index of each schema field
}

// Type is the Go type of the values.
func (c *Codec) Type() reflect.Type { return c.typ }

var codecs sync.Map // reflect.Type -> *Codec

// CodecFor returns the Codec of the values of type t (cached).
func CodecFor(t reflect.Type) *Codec {
	if c, ok := codecs.Load(t); ok {
		return c.(*Codec)
	}
	c := buildCodec(t)
	actual, _ := codecs.LoadOrStore(t, c)
	return actual.(*Codec)
}

var (
	binaryMarshaler   = reflect.TypeFor[encoding.BinaryMarshaler]()
	binaryUnmarshaler = reflect.TypeFor[encoding.BinaryUnmarshaler]()
)

func buildCodec(t reflect.Type) *Codec {
	c := &Codec{typ: t, Kind: CodecJSON}
	if t.Implements(binaryMarshaler) && (t.Implements(binaryUnmarshaler) || reflect.PointerTo(t).Implements(binaryUnmarshaler)) {
		c.Kind = CodecBinary
		return c
	}
	st := t
	if st.Kind() == reflect.Pointer {
		st = st.Elem()
		c.ptr = true
	}
	if st.Kind() != reflect.Struct {
		return c
	}
	var fields []Field
	var index []int
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() {
			continue
		}
		if tag := f.Tag.Get("json"); tag == "-" {
			continue
		}
		k := fieldKind(f.Type.Kind())
		if k == 0 {
			return c // a Field that is not a scalar: JSON
		}
		fields = append(fields, Field{Name: f.Name, Kind: k})
		index = append(index, i)
	}
	if len(fields) == 0 {
		return c
	}
	c.Kind, c.Fields, c.index = CodecFields, fields, index
	return c
}

func fieldKind(k reflect.Kind) byte {
	switch k {
	case reflect.Bool:
		return KindBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return KindInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return KindUint
	case reflect.Float32, reflect.Float64:
		return KindFloat
	case reflect.String:
		return KindString
	}
	return 0
}

// errNilValue is what a nil value (or a nil pointer) is refused with.
var errNilValue = errors.New("nil value")

// encode appends v's encoding to dst. v has the Codec's type.
func (c *Codec) Encode(dst []byte, v any) ([]byte, error) {
	switch c.Kind {
	case CodecBinary:
		b, err := v.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	case CodecJSON:
		b, err := json.Marshal(v)
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	rv := reflect.ValueOf(v)
	if c.ptr {
		if rv.IsNil() {
			return dst, errNilValue
		}
		rv = rv.Elem()
	}
	for i, f := range c.Fields {
		fv := rv.Field(c.index[i])
		switch f.Kind {
		case KindBool:
			if fv.Bool() {
				dst = append(dst, 1)
			} else {
				dst = append(dst, 0)
			}
		case KindInt:
			dst = binary.AppendVarint(dst, fv.Int())
		case KindUint:
			dst = binary.AppendUvarint(dst, fv.Uint())
		case KindFloat:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(fv.Float()))
		case KindString:
			s := fv.String()
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
	}
	return dst, nil
}

// RemoteKey is what a receiver knows of a key a peer defined: its Codec and, for
// CodecFields, the peer's schema.
type RemoteKey struct {
	Name   string
	Kind   byte
	Fields []Field

	mu    sync.Mutex
	plans map[*Codec]*Plan // how to decode into each local type seen
}

// Plan decodes a peer's CodecFields bytes into the local type: for each of the
// peer's fields, the local struct Field it sets (-1: none, skipped).
type Plan struct {
	local  *Codec
	target []int
	err    error // the peer's Codec cannot be decoded into the local type
}

// Local is the local Codec the Plan decodes into.
func (p *Plan) Local() *Codec { return p.local }

// PlanFor returns the Plan that decodes this key's values into local (cached).
func (k *RemoteKey) PlanFor(local *Codec) *Plan {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.plans[local]; ok {
		return p
	}
	p := &Plan{local: local}
	switch {
	case k.Kind != local.Kind:
		p.err = fmt.Errorf("key %q: the peer encodes its values as %s, this replica's values are %s", k.Name, CodecName(k.Kind), CodecName(local.Kind))
	case k.Kind == CodecFields:
		st := local.typ
		if local.ptr {
			st = st.Elem()
		}
		p.target = make([]int, len(k.Fields))
		for i, f := range k.Fields {
			p.target[i] = -1
			sf, ok := st.FieldByName(f.Name)
			if !ok || len(sf.Index) != 1 || !sf.IsExported() || !compatible(f.Kind, fieldKind(sf.Type.Kind())) {
				continue
			}
			p.target[i] = sf.Index[0]
		}
	}
	if k.plans == nil {
		k.plans = map[*Codec]*Plan{}
	}
	k.plans[local] = p
	return p
}

func compatible(remote, local byte) bool {
	if remote == local {
		return true
	}
	// Integers of either signedness fit each other's fields (range checked).
	return (remote == KindInt || remote == KindUint) && (local == KindInt || local == KindUint)
}

func CodecName(k byte) string {
	switch k {
	case CodecFields:
		return "fields"
	case CodecBinary:
		return "binary"
	case CodecJSON:
		return "json"
	}
	return fmt.Sprintf("Codec %d", k)
}

var errMalformedValue = errors.New("malformed value")

// decode decodes b, encoded by a peer with this Plan's key, as a value of the local
// type.
func (p *Plan) Decode(k *RemoteKey, b []byte) (any, error) {
	if p.err != nil {
		return nil, p.err
	}
	c := p.local
	switch c.Kind {
	case CodecBinary:
		t := c.typ
		var nv reflect.Value
		if t.Kind() == reflect.Pointer {
			nv = reflect.New(t.Elem())
		} else {
			nv = reflect.New(t)
		}
		if err := nv.Interface().(encoding.BinaryUnmarshaler).UnmarshalBinary(b); err != nil {
			return nil, err
		}
		if t.Kind() == reflect.Pointer {
			return nv.Interface(), nil
		}
		return nv.Elem().Interface(), nil
	case CodecJSON:
		nv := reflect.New(c.typ)
		if err := json.Unmarshal(b, nv.Interface()); err != nil {
			return nil, err
		}
		return nv.Elem().Interface(), nil
	}
	st := c.typ
	if c.ptr {
		st = st.Elem()
	}
	nv := reflect.New(st)
	sv := nv.Elem()
	for i, f := range k.Fields {
		target := p.target[i]
		var fv reflect.Value
		if target >= 0 {
			fv = sv.Field(target)
		}
		switch f.Kind {
		case KindBool:
			if len(b) < 1 {
				return nil, errMalformedValue
			}
			if fv.IsValid() {
				fv.SetBool(b[0] != 0)
			}
			b = b[1:]
		case KindInt:
			x, n := binary.Varint(b)
			if n <= 0 {
				return nil, errMalformedValue
			}
			b = b[n:]
			if fv.IsValid() {
				setInt(fv, x)
			}
		case KindUint:
			x, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, errMalformedValue
			}
			b = b[n:]
			if fv.IsValid() {
				setUint(fv, x)
			}
		case KindFloat:
			if len(b) < 8 {
				return nil, errMalformedValue
			}
			if fv.IsValid() {
				fv.SetFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)))
			}
			b = b[8:]
		case KindString:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errMalformedValue
			}
			if fv.IsValid() {
				fv.SetString(string(b[n : n+int(l)]))
			}
			b = b[n+int(l):]
		default:
			return nil, errMalformedValue
		}
	}
	if c.ptr {
		return nv.Interface(), nil
	}
	return sv.Interface(), nil
}

// setInt sets an integer Field of either signedness from a signed value, clamped to
// the Field's range.
func setInt(fv reflect.Value, x int64) {
	if fv.CanInt() {
		if fv.OverflowInt(x) {
			return
		}
		fv.SetInt(x)
		return
	}
	if x < 0 || fv.OverflowUint(uint64(x)) {
		return
	}
	fv.SetUint(uint64(x))
}

func setUint(fv reflect.Value, x uint64) {
	if fv.CanUint() {
		if fv.OverflowUint(x) {
			return
		}
		fv.SetUint(x)
		return
	}
	if x > math.MaxInt64 || fv.OverflowInt(int64(x)) {
		return
	}
	fv.SetInt(int64(x))
}
