package postrender

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

func hasNamed(m object, field string, name any) bool {
	for _, have := range objects(m[field]) {
		if have["name"] == name {
			return true
		}
	}
	return false
}

// addNamed appends item to the list field of m unless an item of its name is
// there; an item of its name with other content is an error (the chart set it).
func addNamed(m object, field string, item object) error {
	list := objects(m[field])
	for _, have := range list {
		if have["name"] != item["name"] {
			continue
		}
		if !same(have, item) {
			return fmt.Errorf("%s %v is set already, differently: %v", field, item["name"], have)
		}
		return nil
	}
	m[field] = append(asAny(list), item)
	return nil
}

func same(a, b object) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return bytes.Equal(ja, jb)
}

// toObjects is each of vs (API types) as the generic object its JSON decodes to.
func toObjects[T any](vs []T) []object {
	out := make([]object, 0, len(vs))
	for _, v := range vs {
		data, err := json.Marshal(v)
		if err != nil {
			panic(err) // an API type always encodes
		}
		var o object
		if err := json.Unmarshal(data, &o); err != nil {
			panic(err)
		}
		out = append(out, o)
	}
	return out
}

func fieldEnv(name, path string) object {
	return object{"name": name, "valueFrom": object{"fieldRef": object{"fieldPath": path}}}
}

// mapAt returns m[key] as a map, creating it when absent.
func mapAt(m object, key string) object {
	v, ok := m[key].(object)
	if !ok {
		v = object{}
		m[key] = v
	}
	return v
}

func objects(v any) []object {
	list, _ := v.([]any)
	var out []object
	for _, e := range list {
		if o, ok := e.(object); ok {
			out = append(out, o)
		}
	}
	return out
}

func asAny(list []object) []any {
	out := make([]any, 0, len(list)+1)
	for _, o := range list {
		out = append(out, o)
	}
	return out
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// decode splits a YAML stream into its objects (comments and empty documents go).
func decode(in []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	var docs []object
	for {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		var o object
		if err := yaml.Unmarshal(b, &o); err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		if len(o) > 0 {
			docs = append(docs, o)
		}
	}
}

// encode writes the objects as a YAML stream, in their order.
func encode(docs []object) ([]byte, error) {
	var buf bytes.Buffer
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}
