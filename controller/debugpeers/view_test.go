package debugpeers_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// served GETs the document through the view's handler, as a client does, and checks
// it is the JSON() the snapshot file gets.
func served(t *testing.T, v *debugpeers.View) peers.Document {
	t.Helper()
	rec := httptest.NewRecorder()
	v.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/peers", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /debug/peers: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if string(body) != string(v.JSON()) {
		t.Fatalf("served bytes differ from JSON():\n%s\n%s", body, v.JSON())
	}
	var doc peers.Document
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestServedDocumentShowsTheLatestError: every failure reaches the served document,
// before the first set (not synced) and after it (stale), also when the reason
// stays the same (the rendering is cached per generation: a failure that did not
// move it served the first error forever).
func TestServedDocumentShowsTheLatestError(t *testing.T) {
	store := peers.NewMemoryPeerStore()
	pub := discovery.NewPublisher("file", store, logr.Discard(), discovery.PublisherOptions{Instance: t.Name()})
	v := debugpeers.New(debugpeers.Options{Store: store, Publisher: pub, Self: peers.SelfDocument{Name: "epp-0", Addresses: []string{}}})

	for _, msg := range []string{"peers file missing", "peers file unreadable"} {
		pub.Fail("read", errors.New(msg))
		if doc := served(t, v); doc.LastError != msg || doc.Synced == nil || *doc.Synced {
			t.Fatalf("not synced, after Fail(%q): lastError %q synced %v", msg, doc.LastError, doc.Synced)
		}
	}
	pub.Publish([]peers.PeerMetadata{{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005, Ready: true, Serving: true}})
	if doc := served(t, v); doc.LastError != "" || !*doc.Synced || *doc.Stale || len(doc.Peers) != 1 {
		t.Fatalf("after the first set: %+v", doc)
	}
	for _, msg := range []string{"file removed", "file still removed", "file unreadable"} {
		pub.Fail("read", errors.New(msg))
		doc := served(t, v)
		if doc.LastError != msg || doc.Stale == nil || !*doc.Stale || doc.StaleReason != "read" || len(doc.Peers) != 1 {
			t.Fatalf("stale, after Fail(%q): lastError %q stale %v reason %q peers %d", msg, doc.LastError, doc.Stale, doc.StaleReason, len(doc.Peers))
		}
	}
	pub.Fail("parse", errors.New("not YAML"))
	if doc := served(t, v); doc.LastError != "not YAML" || doc.StaleReason != "parse" {
		t.Fatalf("a new reason: lastError %q reason %q", doc.LastError, doc.StaleReason)
	}
}

func TestDisabledDocument(t *testing.T) {
	if got := string(debugpeers.Disabled().JSON()); got != `{"enabled": false, "peers": []}`+"\n" {
		t.Fatalf("disabled: %q", got)
	}
}
