package charts_test

import (
	"strings"
	"testing"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, "chart tests", func(e *testenv.Env) { env = e }) }

// vals builds a values map from dotted keys, like helm's --set: vals("a.b", 1).
func vals(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		cur := out
		path := strings.Split(kv[i].(string), ".")
		for _, k := range path[:len(path)-1] {
			next, ok := cur[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[k] = next
			}
			cur = next
		}
		cur[path[len(path)-1]] = kv[i+1]
	}
	return out
}
