package peers

import (
	"time"
)

// Source names used in Document.Source.
const (
	SourceEndpointSlice = "endpointslice"
	SourceFile          = "file"
)

// Document is the JSON served at GET /debug/peers and written to the snapshot file.
// Fields may be added, never renamed. Peers is never nil so that it encodes as [].
type Document struct {
	Enabled   bool          `json:"enabled"`
	Source    string        `json:"source,omitempty"`
	Synced    *bool         `json:"synced,omitempty"`
	Self      *SelfDocument `json:"self,omitempty"`
	Peers     []PeerEntry   `json:"peers"`
	UpdatedAt *time.Time    `json:"updatedAt,omitempty"`
	// Stale is true while the view may be out of date: the source cannot be read and
	// the last good set is kept (see "Stale views" in docs/OPERATING.md). StaleSince is when it
	// became stale, StaleReason the cause (refused, reset, timeout, tls,
	// server-error, forbidden, unauthorized, read, parse, other).
	Stale       *bool      `json:"stale,omitempty"`
	StaleSince  *time.Time `json:"staleSince,omitempty"`
	StaleReason string     `json:"staleReason,omitempty"`
	// LastError is the source's last error, while it matters: stale, or not synced.
	LastError string `json:"lastError,omitempty"`
}

// SelfDocument describes the replica that serves the document.
type SelfDocument struct {
	Name      string   `json:"name,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	Addresses []string `json:"addresses"`
}

// PeerEntry is one peer in a Document. ID is "namespace/name".
type PeerEntry struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Address   string `json:"address"`
	Port      int32  `json:"port"`
	// Ready, Serving and Terminating are the peer's conditions (PeerMetadata).
	Ready       bool `json:"ready"`
	Serving     bool `json:"serving"`
	Terminating bool `json:"terminating"`
	// Reachable, LastProbe, ConnectSeconds and ProbeError are present only with
	// reachability probing on (--epp-peer-probe-interval), once the peer was
	// probed: whether the last TCP connection to its peer-sync port succeeded, when
	// that probe started, how long a successful connection took, and the error of
	// a failed one. They never change who is a peer.
	Reachable      *bool      `json:"reachable,omitempty"`
	LastProbe      *time.Time `json:"lastProbe,omitempty"`
	ConnectSeconds *float64   `json:"connectSeconds,omitempty"`
	ProbeError     string     `json:"probeError,omitempty"`
}

// DisabledDocument is what a replica with peer discovery off serves.
func DisabledDocument() Document { return Document{Enabled: false, Peers: []PeerEntry{}} }

// Entries converts peers to document entries, keeping their order.
func Entries(ps []PeerMetadata) []PeerEntry {
	out := make([]PeerEntry, 0, len(ps))
	for _, p := range ps {
		out = append(out, PeerEntry{ID: p.ID(), Name: p.Name, Namespace: p.Namespace, Address: p.Address, Port: p.Port,
			Ready: p.Ready, Serving: p.Serving, Terminating: p.Terminating})
	}
	return out
}
