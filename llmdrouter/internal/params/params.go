// Package params reads what this module's plugins share in their JSON parameters:
// strict decoding, durations and listen addresses, with errors that name the
// parameter at fault.
package params

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
)

// Decode reads a plugin's parameters into v strictly (unknown fields are errors);
// nil or empty parameters leave v as it is. Errors name the plugin type.
func Decode(pluginType string, params *json.Decoder, v any) error {
	if params == nil {
		return nil
	}
	params.DisallowUnknownFields()
	if err := params.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s parameters: %w", pluginType, err)
	}
	return nil
}

// Duration is a duration in JSON as Go writes one: "200ms", "5s".
type Duration struct{ time.Duration }

// UnmarshalJSON reads a string such as "200ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"200ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// CheckAddress checks an optional listen address (empty is none); the error names
// it as name (a parameter or the variable it came from) and gives example.
// The rule is discovery's, the one the discovery plugin's addresses follow.
func CheckAddress(name, addr, example string) error {
	if err := discovery.CheckListenAddress(addr, example); err != nil {
		return fmt.Errorf("invalid %s=%q: %w", name, addr, err)
	}
	return nil
}
