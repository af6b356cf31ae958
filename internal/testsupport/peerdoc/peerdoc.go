// Package peerdoc reads a replica's /debug/peers document as a client does: over
// HTTP, from the address it serves it on, which is always a loopback address in
// tests (a fake pod IP is never dialled). It is the one reader of the document in
// the tests.
package peerdoc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

var client = &http.Client{Timeout: 5 * time.Second}

// Get fetches and decodes http://addr/debug/peers; it also returns the raw bytes.
func Get(addr string) (peers.Document, []byte, error) {
	return GetContext(context.Background(), addr)
}

// GetContext is Get bounded by ctx. An addr that is not a loopback address (or
// localhost) is refused without a request.
func GetContext(ctx context.Context, addr string) (peers.Document, []byte, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return peers.Document{}, nil, err
	}
	if ip := net.ParseIP(host); (ip == nil && host != "localhost") || (ip != nil && !ip.IsLoopback()) {
		return peers.Document{}, nil, fmt.Errorf("refusing to read /debug/peers at %s: tests read it through a loopback address only", addr)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/peers", nil)
	if err != nil {
		return peers.Document{}, nil, err
	}
	resp, err := client.Do(req)
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

// WaitSynced reads the document at addr until it says synced (within, else it
// fails t with the last document or error) and returns it.
func WaitSynced(t wait.T, addr string, within time.Duration) peers.Document {
	t.Helper()
	var doc peers.Document
	wait.For(t, within, func() string {
		var raw []byte
		var err error
		if doc, raw, err = Get(addr); err != nil {
			return err.Error()
		}
		if doc.Synced == nil || !*doc.Synced {
			return fmt.Sprintf("not synced: %s", raw)
		}
		return ""
	})
	return doc
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
