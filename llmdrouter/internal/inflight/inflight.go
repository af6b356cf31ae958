// Package inflight reads llm-d-router's in-flight load out of a replica's
// /debug/peer-sync document, as the tests of state sharing compare it.
package inflight

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
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
