package discovery

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// Extras are the settings of peer discovery beside its source's, the same whatever
// the source: reachability probing, the answer on the peer-sync port and the debug
// address. The epp binary's flags and every <source>-peer-discovery plugin's
// parameters read them from the one declaration here (BindExtras), so that a value
// means the same in both.
type Extras struct {
	// ProbeInterval, if above 0, probes every peer's peer-sync port about this often
	// (ProbeIntervalSetting).
	ProbeInterval time.Duration
	// PeerSyncAddress, if set, is listened on, and each connection answered with a
	// line naming this replica (PeerSyncAddressSetting).
	PeerSyncAddress string
	// DebugAddress, if set, serves /debug/peers there (DebugAddressSetting: the
	// plugins'; the binary serves it on its metrics address).
	DebugAddress string
}

// The variables the extras' settings fall back to, beside reachability.IntervalEnv.
const (
	PeerSyncAddressEnv = "EPP_PEER_SYNC_ADDRESS"
	DebugAddressEnv    = "EPP_PEER_DEBUG_ADDRESS"
)

// The extras' settings.
var (
	// ProbeIntervalSetting turns reachability probing on: its rule is
	// reachability.CheckInterval (0 is off).
	ProbeIntervalSetting = Setting{Param: "probeInterval", Flag: "epp-peer-probe-interval", Env: []string{reachability.IntervalEnv},
		Usage: "Probe every peer's peer-sync port (a TCP connect) about this often, jittered, and report reachability in /debug/peers; 0 is off, else at least 100ms. Never changes who is a peer."}
	// PeerSyncAddressSetting is where this replica answers its peers' probes.
	PeerSyncAddressSetting = Setting{Param: "peerSyncAddress", Flag: "peer-sync-bind-address", Env: []string{PeerSyncAddressEnv},
		Usage: `Listen here (e.g. ":9005") and answer each connection with one line naming this replica, so that other replicas' probes find it reachable; "" is off. Leave it off when another container owns the peer-sync port.`}
	// DebugAddressSetting is where a plugin serves /debug/peers (the binary has no
	// such flag: it serves the document on its metrics address).
	DebugAddressSetting = Setting{Param: "debugAddress", Env: []string{DebugAddressEnv},
		Usage: `Serve /debug/peers here (e.g. ":9091"); "" is off.`}
)

// BindExtras binds the extras' settings to e (whose values on entry are the
// defaults); each value set is checked.
func BindExtras(b *Binder, e *Extras) {
	b.String(&e.DebugAddress, DebugAddressSetting, checkAddress(":9091"))
	b.Duration(&e.ProbeInterval, ProbeIntervalSetting, reachability.CheckInterval)
	b.String(&e.PeerSyncAddress, PeerSyncAddressSetting, checkAddress(":9005"))
}

// DeclaredExtras are the extras' settings as BindExtras declares them.
func DeclaredExtras() []Binding {
	b := newBinder(nil, nil)
	BindExtras(b, &Extras{})
	return b.Bindings()
}

// ConfigureExtras reads the extras from a plugin's parameters (each falling back to
// its variables, read with getenv), and returns the parameters that are not theirs
// (the source's). Errors are one line naming the parameter, or the variable the
// value came from.
func ConfigureExtras(params map[string]json.RawMessage, getenv func(string) string) (Extras, map[string]json.RawMessage, error) {
	names := map[string]bool{}
	for _, x := range DeclaredExtras() {
		names[x.Param] = true
	}
	mine, rest := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range params {
		if names[k] {
			mine[k] = v
		} else {
			rest[k] = v
		}
	}
	var e Extras
	b := NewBinder(mine, getenv)
	BindExtras(b, &e)
	return e, rest, b.Err()
}

// ExtrasParams are the extras' parameter names, in their order of declaration.
func ExtrasParams() []string {
	var out []string
	for _, x := range DeclaredExtras() {
		out = append(out, x.Param)
	}
	return slices.Clip(out)
}

// CheckListenAddress refuses a listen address that is not host:port with a port;
// "" (none) passes. The error says what is wanted, with example; the caller names
// the setting.
func CheckListenAddress(addr, example string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("want host:port, e.g. %q", example)
	}
	return nil
}

// checkAddress is CheckListenAddress for a Binder.
func checkAddress(example string) func(string) error {
	return func(addr string) error { return CheckListenAddress(addr, example) }
}
