// Package settingnames turns the names of peer-source settings as the epp binary's
// flags name them into their names as plugin parameters, from the sources' own
// declarations, so that a test can compare the two messages of one bad value.
package settingnames

import (
	"sort"
	"strings"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
)

// FlagToParam rewrites every flag of specs (--epp-peer-port) into its parameter
// (port); longer flags first, so that --epp-peer-port-name is not cut short.
func FlagToParam(specs []discovery.SourceSpec) *strings.Replacer {
	seen := map[string]string{}
	for _, spec := range specs {
		for _, x := range discovery.Declared(spec) {
			if x.Flag != "" {
				seen["--"+x.Flag] = x.Param
			}
		}
	}
	flags := make([]string, 0, len(seen))
	for f := range seen {
		flags = append(flags, f)
	}
	sort.Slice(flags, func(i, j int) bool {
		return len(flags[i]) > len(flags[j]) || len(flags[i]) == len(flags[j]) && flags[i] < flags[j]
	})
	pairs := make([]string, 0, 2*len(flags))
	for _, f := range flags {
		pairs = append(pairs, f, seen[f])
	}
	return strings.NewReplacer(pairs...)
}
