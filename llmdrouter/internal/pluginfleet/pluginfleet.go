// Package pluginfleet runs the plugins of several EPP replicas in one test process,
// built as the EPP's configuration loader builds them (from upstream's registry,
// with a handle, the discovery first): peers from DNS SRV records served by a test
// DNS server, replica i at 127.0.0.(i+2), the discovery started as the wiring starts
// it. Replicas can be started, stopped and started again (a restart).
package pluginfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload"
	"github.com/llm-d/llm-d-router/pkg/epp/statesync"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// DNSName is the SRV name the replicas' discovery looks up.
const DNSName = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"

// Params is a plugin's JSON parameters.
func Params(s string) *json.Decoder { return json.NewDecoder(strings.NewReader(s)) }

// SetEnv clears the variables this module's plugins read and sets kv.
func SetEnv(t *testing.T, kv ...string) {
	for _, k := range []string{"POD_NAME", "POD_IP", "POD_IPS", "NAMESPACE", "POD_NAMESPACE", "EPP_PEER_SYNC_ADDRESS",
		"EPP_PEER_SYNC_INTERVAL", "EPP_PEER_SYNC_TLS_DIR", "EPP_PEER_DEBUG_ADDRESS", "EPP_PEER_PROBE_INTERVAL"} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// Fleet is n replicas' addresses and the DNS records that list them.
type Fleet struct {
	t        *testing.T
	srv      *dnsserver.Server
	unlisted map[int]bool
	replicas []*Replica
	// PodList, if set, is every replica's handle's pod list (the pool's endpoints).
	PodList func() []types.NamespacedName
}

// Replica is one EPP's plugins.
type Replica struct {
	Name, IP, Debug string
	Port            int
	Handle          fwkplugin.Handle
	Syncer          fwkdl.CrossReplicaSyncer
	Inflight        *inflightload.InFlightLoadProducer
	cancel          context.CancelFunc
	dns             string
}

// New prepares n replicas (none started) and the DNS records listing all of them.
func New(t *testing.T, n int) *Fleet {
	t.Helper()
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	f := &Fleet{t: t, srv: srv, unlisted: map[int]bool{}}
	for i := range n {
		r := &Replica{Name: fmt.Sprintf("epp-%d", i), IP: fmt.Sprintf("127.0.0.%d", i+2)}
		r.Port = testenv.FreePort(r.IP)
		srv.SetAddrs(r.Name+".epp-peers.ns.svc.cluster.local", r.IP)
		f.replicas = append(f.replicas, r)
	}
	f.publish()
	for _, r := range f.replicas {
		r.dns = srv.Addr()
	}
	return f
}

// publish serves the SRV records of the replicas listed.
func (f *Fleet) publish() {
	var recs []dnsserver.SRV
	for i, r := range f.replicas {
		if !f.unlisted[i] {
			recs = append(recs, dnsserver.SRV{Target: r.Name + ".epp-peers.ns.svc.cluster.local", Port: uint16(r.Port)})
		}
	}
	f.srv.SetSRV(DNSName, recs...)
}

// List lists replica i in the DNS records, or takes it out (as a replica that is
// not ready, or frozen past the readiness probe, leaves the EndpointSlice): every
// replica's discovery sees it within its interval (1s).
func (f *Fleet) List(i int, listed bool) {
	f.unlisted[i] = !listed
	f.publish()
}

// Start builds and starts replica i: the DNS peer discovery, upstream's in-flight
// load producer and peer-syncer with syncerParams; more plugins may be added to its
// Handle. It stops with the test, or with Stop.
func (f *Fleet) Start(i int, syncerParams string) *Replica {
	t := f.t
	t.Helper()
	r := f.replicas[i]
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	// On the replica's own address: a port freed on 127.0.0.1 is soon taken again
	// by the other tests' connections, and then this replica's discovery stops.
	r.Debug = fmt.Sprintf("%s:%d", r.IP, testenv.FreePort(r.IP))
	SetEnv(t, "POD_NAME", r.Name, "POD_IP", r.IP, "NAMESPACE", "ns")
	var podList fwkplugin.PodListFunc
	if f.PodList != nil {
		podList = f.PodList
	}
	r.Handle = fwkplugin.NewEppHandle(ctx, podList, fwkplugin.WithMetricsRecorder(prometheus.NewRegistry()))
	pd, err := fwkplugin.Registry[peerdiscovery.DNSType]("peer-discovery",
		Params(fmt.Sprintf(`{"name": %q, "interval": "1s", "server": %q, "debugAddress": %q, "peerSyncAddress": "%s:%d"}`, DNSName, r.dns, r.Debug, r.IP, r.Port)), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	r.Handle.AddPlugin("peer-discovery", pd)
	p, err := inflightload.InFlightLoadProducerFactory("inflight", nil, r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	r.Inflight = p.(*inflightload.InFlightLoadProducer)
	r.Handle.AddPlugin("inflight", p)
	s, err := fwkplugin.Registry[peersyncer.Type]("peer-syncer", Params(syncerParams), r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	r.Syncer = s.(fwkdl.CrossReplicaSyncer)
	r.Handle.AddPlugin("peer-syncer", s)
	// What the wiring does for dataLayer.peerDiscovery.pluginRef.
	// Start ends early only on an error (a listener it cannot open): the replica
	// then has no peers and refuses every connection, so the test fails saying so.
	go func() {
		err := pd.(fwkdl.PeerDiscovery).Start(ctx, fwkdl.NewPeerNotifier(statesync.NewMemoryPeerStore()))
		if err != nil && ctx.Err() == nil {
			t.Errorf("%s: peer discovery stopped: %v", r.Name, err)
		}
	}()
	return r
}

// StartAll starts every replica.
func (f *Fleet) StartAll(syncerParams string) []*Replica {
	var out []*Replica
	for i := range f.replicas {
		out = append(out, f.Start(i, syncerParams))
	}
	return out
}

// Stop stops replica i's plugins (its process ends).
func (f *Fleet) Stop(i int) {
	if c := f.replicas[i].cancel; c != nil {
		c()
	}
}

// WaitConnected waits until each of rs holds an in-sync connection to every other
// one of rs, both ways: each one's syncer has pushed its full state to the others
// and had theirs. A replica sends what it publishes (the shared prefix index's
// placements) on the connections it has; before they are up, a decision reaches
// only the peers already connected, so a test that asserts every peer gets a
// decision starts routing after this.
func WaitConnected(t *testing.T, within time.Duration, rs ...*Replica) {
	t.Helper()
	wait.ForEvery(t, within, 10*time.Millisecond, func() string {
		for _, r := range rs {
			doc := r.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-")
			peers := map[string]peersync.PeerStatus{}
			for _, p := range doc.Peers {
				peers[p.ID] = p
			}
			for _, o := range rs {
				if o == r {
					continue
				}
				p, ok := peers["ns/"+o.Name]
				switch {
				case !ok:
					return fmt.Sprintf("%s does not list %s as a peer yet", r.Name, o.Name)
				case p.Outbound != "in-sync":
					return fmt.Sprintf("%s's connection to %s is %s %s (%s)", r.Name, o.Name, p.Outbound, p.OutboundError, farSide(o, r))
				case !p.InSync:
					return fmt.Sprintf("%s has no full state from %s yet", r.Name, o.Name)
				}
			}
		}
		return ""
	})
}

// farSide describes what replica o sees of replica r: whether its discovery lists
// itself and r, and what it has refused, so that a connection that stays down says
// which end holds it down.
func farSide(o, r *Replica) string {
	doc := o.Syncer.(*peersyncer.Plugin).Syncer().Document("-", "-")
	lists := false
	for _, p := range doc.Peers {
		lists = lists || p.ID == "ns/"+r.Name
	}
	var refused []string
	for reason, n := range doc.Rejections {
		if n > 0 {
			refused = append(refused, fmt.Sprintf("%s=%v", reason, n))
		}
	}
	slices.Sort(refused)
	return fmt.Sprintf("%s lists itself %v, lists %s %v, %d peers, refused %v", o.Name, doc.Listed, r.Name, lists, len(doc.Peers), refused)
}
