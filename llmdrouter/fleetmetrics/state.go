package fleetmetrics

import (
	"encoding/json"
	"slices"
	"time"
)

// State is what /debug/fleet-metrics/<name> shows.
type State struct {
	// Self is this replica; Members the replicas the servers are shared among now
	// (this one and the peers heard from within the TTL).
	Self    string   `json:"self"`
	Members []string `json:"members"`
	Sharing bool     `json:"sharing"`
	// Servers, by ID.
	Servers []ServerState `json:"servers"`
}

// ServerState is one server: who scrapes it and how old its data is.
type ServerState struct {
	Server string `json:"server"`
	// Mode is this replica's part at the server's last tick: owned, alone,
	// takeover or peer. Owner is the member that owns it now.
	Mode  string `json:"mode"`
	Owner string `json:"owner"`
	// ScrapedBy read the data the extractors have; AgeSeconds is how long ago it
	// was read (by the reader's clock), -1 if never.
	ScrapedBy  string  `json:"scrapedBy,omitempty"`
	AgeSeconds float64 `json:"ageSeconds"`
}

// State is the source's state now.
func (p *Plugin) State() State {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := State{Self: p.self, Sharing: p.bc != nil, Members: p.heard.members(p.self, now, p.ttl)}
	for id, s := range p.servers {
		age := -1.0
		if !s.scrapedAt.IsZero() {
			age = now.Sub(s.scrapedAt).Seconds()
		}
		by := p.self
		if p.bc != nil {
			by = owner(id, st.Members)
		}
		st.Servers = append(st.Servers, ServerState{Server: id, Mode: s.lastMode, Owner: by, ScrapedBy: s.scrapedBy, AgeSeconds: age})
	}
	slices.SortFunc(st.Servers, func(a, b ServerState) int {
		if a.Server < b.Server {
			return -1
		}
		return 1
	})
	return st
}

// DumpState implements fwkplugin.StateDumper (the EPP's /debug/plugins/state).
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.Marshal(p.State()) }
