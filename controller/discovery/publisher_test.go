package discovery_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

func peer(name, addr string) peers.PeerMetadata {
	return peers.PeerMetadata{Namespace: "ns", Name: name, Address: addr, Port: 9005, Ready: true, Serving: true}
}

var self = peers.Self{Namespace: "ns", Name: "epp-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}

// newPublisher returns a Publisher into a store, under a metrics instance of the
// test's own.
func newPublisher(t *testing.T) (*discovery.Publisher, *peers.MemoryPeerStore) {
	store := peers.NewMemoryPeerStore()
	return discovery.NewPublisher("test", store, logr.Discard(), discovery.PublisherOptions{
		Instance: t.Name(), Self: self, Reasons: []string{"read"}}), store
}

func ids(ps []peers.PeerMetadata) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID())
	}
	return strings.Join(out, ",")
}

// moved reports whether the generation moved since gen, and its channel closed.
func moved(t *testing.T, p *discovery.Publisher, gen uint64, ch <-chan struct{}) bool {
	t.Helper()
	now, _ := p.Generation()
	select {
	case <-ch:
		if now == gen {
			t.Fatal("the generation's channel closed without the generation moving")
		}
		return true
	default:
		if now != gen {
			t.Fatal("the generation moved without closing its channel")
		}
		return false
	}
}

func TestPublishLeavesSelfOutAndSyncs(t *testing.T) {
	p, store := newPublisher(t)
	if p.Synced() || p.Len() != 0 {
		t.Fatal("synced before the first set")
	}
	// Self by name, and by address under another name.
	c := p.Publish([]peers.PeerMetadata{peer("epp-0", "10.9.9.9"), peer("epp-1", "10.0.0.2"), peer("alias", "10.0.0.1")})
	if ids(c.Upserts) != "ns/epp-1" || ids(store.Peers()) != "ns/epp-1" || p.Len() != 1 {
		t.Fatalf("published %s, store %s: self must be left out by name and by address", ids(c.Upserts), ids(store.Peers()))
	}
	select {
	case <-p.Ready():
	default:
		t.Fatal("Ready not closed by the first set")
	}
	if !p.Synced() || p.SyncedAt().IsZero() || p.LastError() != nil {
		t.Fatalf("synced=%v at %v err=%v", p.Synced(), p.SyncedAt(), p.LastError())
	}
	if got := testutil.ToFloat64(p.Metrics().Synced); got != 1 {
		t.Fatalf("synced gauge %v", got)
	}
	// The same set again changes nothing, not even the generation.
	gen, ch := p.Generation()
	if c := p.Publish([]peers.PeerMetadata{peer("epp-1", "10.0.0.2")}); !c.Empty() || moved(t, p, gen, ch) {
		t.Fatalf("an unchanged set published %+v", c)
	}
}

func TestPublishChangeLeavesSelfOut(t *testing.T) {
	p, store := newPublisher(t)
	p.PublishChange(peers.Change{Upserts: []peers.PeerMetadata{peer("epp-1", "10.0.0.2"), peer("epp-0", "10.0.0.1"), peer("epp-2", "10.0.0.3")}}, 3)
	if ids(store.Peers()) != "ns/epp-1,ns/epp-2" || p.Len() != 2 {
		t.Fatalf("store %s, size %d: self must be left out of an incremental change too", ids(store.Peers()), p.Len())
	}
	if got := testutil.ToFloat64(p.Metrics().Peers); got != 2 {
		t.Fatalf("peers gauge %v, want 2", got)
	}
}

// TestFailBeforeSync: the source stays not ready and says why; every failure moves
// the generation, so a rendering of the status is never older than the last one.
func TestFailBeforeSync(t *testing.T) {
	p, _ := newPublisher(t)
	errs := p.Metrics().Errors("read")
	for i, msg := range []string{"first failure", "second failure", "second failure, again"} {
		gen, ch := p.Generation()
		p.Fail("read", errors.New(msg))
		if !moved(t, p, gen, ch) {
			t.Fatalf("failure %d did not move the generation: what is served from it would keep the previous error", i+1)
		}
		if p.LastError() == nil || p.LastError().Error() != msg || p.Synced() {
			t.Fatalf("after %q: synced=%v err=%v", msg, p.Synced(), p.LastError())
		}
		if stale, _, _, _ := p.Stale(); stale {
			t.Fatal("a source that never synced is not stale: it is not ready")
		}
		if got := testutil.ToFloat64(errs); got != float64(i+1) {
			t.Fatalf("errors_total %v after %d failures", got, i+1)
		}
	}
	p.Publish(nil)
	if !p.Synced() || p.LastError() != nil {
		t.Fatalf("after the first set: synced=%v err=%v", p.Synced(), p.LastError())
	}
}

// TestFailAfterSyncIsStale: the view turns stale with the last good set kept, says
// the latest reason and error, and a complete read makes it fresh.
func TestFailAfterSyncIsStale(t *testing.T) {
	p, store := newPublisher(t)
	p.Publish([]peers.PeerMetadata{peer("epp-1", "10.0.0.2")})
	p.Fail("read", errors.New("gone"))
	stale, since, reason, err := p.Stale()
	if !stale || since.IsZero() || reason != "read" || err.Error() != "gone" {
		t.Fatalf("stale=%v since=%v reason=%q err=%v", stale, since, reason, err)
	}
	if ids(store.Peers()) != "ns/epp-1" || !p.Synced() {
		t.Fatal("a failure changed the set or the readiness")
	}
	if got := testutil.ToFloat64(p.Metrics().Stale); got != 1 {
		t.Fatalf("stale gauge %v", got)
	}
	transitions := p.Metrics().StaleTransitions("read")
	// A new error for the same reason, then another reason: both shown.
	for _, f := range []struct{ reason, msg string }{{"read", "still gone"}, {"parse", "bad"}} {
		gen, ch := p.Generation()
		p.Fail(f.reason, errors.New(f.msg))
		if !moved(t, p, gen, ch) {
			t.Fatalf("Fail(%s, %s) while stale did not move the generation", f.reason, f.msg)
		}
		if _, s2, r, e := p.Stale(); r != f.reason || e.Error() != f.msg || !s2.Equal(since) {
			t.Fatalf("while stale, Fail(%s, %s) shows reason %q error %v since %v (was %v)", f.reason, f.msg, r, e, s2, since)
		}
		if p.LastError().Error() != f.msg {
			t.Fatalf("LastError %v, want %s", p.LastError(), f.msg)
		}
	}
	if got := testutil.ToFloat64(transitions); got != 1 {
		t.Fatalf("stale_total{read} %v: one stale period counts once", got)
	}
	// A complete read: fresh, no error.
	gen, ch := p.Generation()
	p.Publish([]peers.PeerMetadata{peer("epp-1", "10.0.0.2")})
	if stale, _, _, _ := p.Stale(); stale || p.LastError() != nil || !moved(t, p, gen, ch) {
		t.Fatalf("after a complete read: stale=%v err=%v", stale, p.LastError())
	}
	if got := testutil.ToFloat64(p.Metrics().Stale); got != 0 {
		t.Fatalf("stale gauge %v after recovery", got)
	}
	// ClearStale does the same without a set.
	p.Fail("read", errors.New("again"))
	p.ClearStale()
	if stale, _, _, _ := p.Stale(); stale || p.LastError() != nil {
		t.Fatal("ClearStale left the view stale")
	}
}

// TestSelfListed: a source that never says is taken to list this replica (a peers
// file may leave it out); one that says is believed, and each change closes the
// channel SelfListed returned, so that a syncer waiting on it wakes. Lists tells
// from a complete set, by name or address.
func TestSelfListed(t *testing.T) {
	p, _ := newPublisher(t)
	listed, ch := p.SelfListed()
	if !listed {
		t.Fatal("SelfListed is false for a source that never said")
	}
	p.SetSelfListed(false)
	select {
	case <-ch:
	default:
		t.Fatal("SetSelfListed(false) did not close the channel")
	}
	listed, ch = p.SelfListed()
	if listed {
		t.Fatal("SelfListed after SetSelfListed(false)")
	}
	p.SetSelfListed(false) // no change: the channel stays open
	select {
	case <-ch:
		t.Fatal("SetSelfListed of the same value closed the channel")
	default:
	}
	p.SetSelfListed(true)
	if listed, _ = p.SelfListed(); !listed {
		t.Fatal("SelfListed after SetSelfListed(true)")
	}
	if !p.Lists([]peers.PeerMetadata{peer("epp-1", "10.0.0.2"), peer("x", "10.0.0.1")}) {
		t.Error("Lists: this replica's address is not found")
	}
	if p.Lists([]peers.PeerMetadata{peer("epp-1", "10.0.0.2")}) {
		t.Error("Lists: a set without this replica lists it")
	}
}
