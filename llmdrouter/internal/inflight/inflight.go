// Package inflight reads llm-d-router's in-flight load out of a replica's
// /debug/peer-sync document, as the tests of state sharing compare it.
package inflight

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// Requests is the aggregated in-flight requests per endpoint in doc (the in-flight
// producer's aggregate over every replica's value: what the replica's scoring reads).
// Endpoints with no value of any replica yet are left out.
func Requests(doc peersync.Document) (map[string]int64, error) {
	out := map[string]int64{}
	for _, k := range doc.Keys {
		for _, e := range k.Endpoints {
			if len(e.Aggregate) == 0 {
				continue
			}
			var l struct{ Requests int64 }
			if err := json.Unmarshal(e.Aggregate, &l); err != nil {
				return nil, fmt.Errorf("key %s, endpoint %s: %w", k.Key, e.Endpoint, err)
			}
			out[e.Endpoint] = l.Requests
		}
	}
	return out, nil
}

// Describe is m as "endpoint=n" pairs, sorted by endpoint.
func Describe(m map[string]int64) string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// WaitLoads waits until every observer sees want for the endpoints in want (an
// observer returns the aggregated loads it reads: Requests of a replica's
// document), and returns how long that took; after within it fails t naming the
// step and what each observer saw. It is the one wait of the state-sharing tests:
// the real EPP's on the local API server and on kind.
func WaitLoads(t wait.T, step string, within time.Duration, observers map[string]func() (map[string]int64, error), want map[string]int64) time.Duration {
	t.Helper()
	names := make([]string, 0, len(observers))
	for name := range observers {
		names = append(names, name)
	}
	sort.Strings(names)
	return wait.For(t, within, func() string {
		var wrong []string
		for _, name := range names {
			got, err := observers[name]()
			if err != nil {
				wrong = append(wrong, name+": "+err.Error())
				continue
			}
			for ep, n := range want {
				if v, ok := got[ep]; !ok || v != n {
					wrong = append(wrong, fmt.Sprintf("%s sees %s, want %s", name, Describe(got), Describe(want)))
					break
				}
			}
		}
		if len(wrong) > 0 {
			return step + ":\n  " + strings.Join(wrong, "\n  ")
		}
		return ""
	})
}
