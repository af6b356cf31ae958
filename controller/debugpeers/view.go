package debugpeers

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/reachability"
)

// View is the /debug/peers document of one discovery: its source's published set
// (Store) and status (Publisher), and optionally what reachability probes found. It
// renders the document once per change of any of them and serves that rendering
// until the next change. It is safe for concurrent use.
type View struct {
	store  peers.Reader
	pub    *discovery.Publisher // nil with peer discovery off
	prober *reachability.Prober // nil with probing off
	self   peers.SelfDocument

	rendered atomic.Pointer[rendering] // the document of one generation
	renderMu sync.Mutex                // serializes rendering
	renderer docRenderer               // guarded by renderMu
}

// Options are what a View shows.
type Options struct {
	// Store holds the published set; Publisher is its source's. With a nil
	// Publisher the document says peer discovery is off.
	Store     peers.Reader
	Publisher *discovery.Publisher
	// Prober, if set, adds each peer's reachability.
	Prober *reachability.Prober
	// Self describes the replica.
	Self peers.SelfDocument
}

// New returns the view of opts.
func New(opts Options) *View {
	return &View{store: opts.Store, pub: opts.Publisher, prober: opts.Prober, self: opts.Self}
}

// Disabled is the view of a replica with peer discovery off.
func Disabled() *View { return &View{} }

// JSON is the document: exactly the bytes ServeHTTP serves and WriteSnapshots writes.
func (v *View) JSON() []byte {
	gen := v.generation()
	if r := v.rendered.Load(); r != nil && r.gen == gen {
		return r.json
	}
	v.renderMu.Lock()
	defer v.renderMu.Unlock()
	if r := v.rendered.Load(); r != nil && r.gen == gen {
		return r.json // rendered while this call waited
	}
	doc, ps := v.document()
	var probe func(string) reachability.Status
	if v.prober != nil {
		probe = v.probeStatus
	}
	b := v.renderer.render(doc, ps, probe)
	v.rendered.Store(&rendering{gen: gen, json: b})
	return b
}

// ServeHTTP serves the document (GET).
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b := v.JSON()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// probeStatus is what the reachability probes found for a peer (zero before its
// first probe).
func (v *View) probeStatus(id string) reachability.Status {
	st, _ := v.prober.Status(id)
	return st
}

// document is the document without its peers, and the peers.
func (v *View) document() (peers.Document, []peers.PeerMetadata) {
	if v.pub == nil {
		return peers.DisabledDocument(), nil
	}
	snap := v.store.Snapshot()
	synced := v.pub.Synced()
	stale, since, reason, staleErr := v.pub.Stale()
	self := v.self
	doc := peers.Document{
		Enabled: true,
		Source:  v.pub.Name(),
		Synced:  &synced,
		Self:    &self,
		Stale:   &stale,
	}
	if stale {
		s := since.UTC()
		doc.StaleSince, doc.StaleReason = &s, reason
		if staleErr != nil {
			doc.LastError = staleErr.Error()
		}
	} else if err := v.pub.LastError(); err != nil && !synced {
		doc.LastError = err.Error()
	}
	updated := snap.UpdatedAt
	if updated.IsZero() {
		updated = v.pub.SyncedAt()
	}
	if !updated.IsZero() {
		u := updated.UTC()
		doc.UpdatedAt = &u
	}
	return doc, snap.Peers
}

// rendering is the document of one generation of the publisher and of the prober.
type rendering struct {
	gen  generation
	json []byte
}

type generation struct{ pub, probes uint64 }

func (v *View) generation() generation {
	var g generation
	if v.pub != nil {
		g.pub, _ = v.pub.Generation()
	}
	if v.prober != nil {
		g.probes, _ = v.prober.Generation()
	}
	return g
}

// changed returns channels closed at the next change of the set or the status, and
// of a peer's reachability (nil when there is no such thing to change).
func (v *View) changed() (status, reachable <-chan struct{}) {
	if v.pub != nil {
		_, status = v.pub.Generation()
	}
	if v.prober != nil {
		_, reachable = v.prober.Generation()
	}
	return status, reachable
}
