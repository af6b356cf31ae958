// Package peerdoc reads a replica's /debug/peers document as a client does: over
// HTTP, from the address it serves it on (always 127.0.0.1 in tests).
package peerdoc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

var client = &http.Client{Timeout: 5 * time.Second}

// Get fetches and decodes http://addr/debug/peers; it also returns the raw bytes.
func Get(addr string) (peers.Document, []byte, error) {
	resp, err := client.Get("http://" + addr + "/debug/peers")
	if err != nil {
		return peers.Document{}, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return peers.Document{}, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return peers.Document{}, b, fmt.Errorf("GET /debug/peers: %s: %s", resp.Status, b)
	}
	var doc peers.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		return peers.Document{}, b, fmt.Errorf("GET /debug/peers: not a peers document: %w", err)
	}
	return doc, b, nil
}

// Must is Get for a test: a failure fails it.
func Must(t interface {
	Helper()
	Fatal(...any)
}, addr string) peers.Document {
	t.Helper()
	doc, _, err := Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
