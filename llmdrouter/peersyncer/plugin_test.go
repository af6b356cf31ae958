package peersyncer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/pluginfleet"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
)

// The plugin is upstream's CrossReplicaSyncer, compiled against upstream's interface.
var _ fwkdl.CrossReplicaSyncer = (*peersyncer.Plugin)(nil)

func init() {
	peerdiscovery.Register()
	peersyncer.Register()
}

var params = pluginfleet.Params

// eppReplica is one EPP's plugins (pluginfleet).
type eppReplica struct{ *pluginfleet.Replica }

const dnsName = pluginfleet.DNSName

// startReplicas starts n replicas on 127.0.0.2.. whose peers come from DNS SRV
// records served by a test DNS server.
func startReplicas(t *testing.T, n int, syncerParams string) []*eppReplica {
	t.Helper()
	var rs []*eppReplica
	for _, r := range pluginfleet.New(t, n).StartAll(syncerParams) {
		rs = append(rs, &eppReplica{r})
	}
	return rs
}

// publish does what llm-d-router's cross-replica publisher does each interval: Set
// the contributor's fresh local snapshot of the endpoint.
func (r *eppReplica) publish(t *testing.T, endpoint string, requests int64) {
	t.Helper()
	spec := r.Inflight.CrossReplicaState()
	v := &attrconcurrency.InFlightLoad{Requests: requests, Tokens: 10 * requests}
	if err := r.Syncer.Set(context.Background(), spec.StateKey, endpoint, fwkdl.Cloneable(v)); err != nil {
		t.Fatal(err)
	}
}

// load is what the runtime's attribute closure reads: Get with the contributor's
// own Aggregate (whose type assertions must hold for the peers' values).
func (r *eppReplica) load(endpoint string) (int64, bool) {
	spec := r.Inflight.CrossReplicaState()
	v, ok, err := r.Syncer.Get(context.Background(), spec.StateKey, endpoint, spec.Aggregate)
	if err != nil || !ok {
		return -1, false
	}
	l := v.(*attrconcurrency.InFlightLoad)
	return l.Requests, true
}

func waitLoad(t *testing.T, rs []*eppReplica, endpoint string, want int64) {
	t.Helper()
	wait.For(t, 10*time.Second, func() string {
		var wrong []string
		for _, r := range rs {
			if got, _ := r.load(endpoint); got != want {
				wrong = append(wrong, fmt.Sprintf("%s=%d", r.Name, got))
			}
		}
		if len(wrong) > 0 {
			return fmt.Sprintf("%s: want %d in-flight requests on every replica, got %s", endpoint, want, strings.Join(wrong, " "))
		}
		return ""
	})
}

// TestInFlightLoadIsSummedAcrossReplicas: three EPPs' plugins, built through
// upstream's registry and handle, peers from DNS; each replica publishes its local
// in-flight load and reads the sum of all three with the in-flight producer's own
// Aggregate.
func TestInFlightLoadIsSummedAcrossReplicas(t *testing.T) {
	rs := startReplicas(t, 3, `{"peerDiscoveryRef": "peer-discovery", "interval": "50ms"}`)
	const ep = "llm/vllm-0"
	for i, r := range rs {
		r.publish(t, ep, int64(i+1))
	}
	waitLoad(t, rs, ep, 6)
	rs[0].publish(t, ep, 0)
	waitLoad(t, rs, ep, 5)
	// Delete on replica 2 (the endpoint left its datastore): its share goes everywhere.
	if err := rs[2].Syncer.Delete(context.Background(), rs[2].Inflight.CrossReplicaState().StateKey, ep); err != nil {
		t.Fatal(err)
	}
	waitLoad(t, rs[:2], ep, 2)

	// /debug/peer-sync on the discovery plugin's debug address: the values per
	// replica, the aggregate, and the peers in sync.
	resp, err := http.Get("http://" + rs[0].Debug + "/debug/peer-sync?endpoint=llm/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc peersync.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Peers) != 2 || !doc.Peers[0].InSync || !doc.Peers[1].InSync {
		t.Fatalf("peers: %+v", doc.Peers)
	}
	if len(doc.Keys) != 1 || len(doc.Keys[0].Endpoints) != 1 {
		t.Fatalf("keys: %+v", doc.Keys)
	}
	var agg attrconcurrency.InFlightLoad
	if err := json.Unmarshal(doc.Keys[0].Endpoints[0].Aggregate, &agg); err != nil || agg.Requests != 2 || agg.Tokens != 20 {
		t.Fatalf("aggregate of %s: %s (%v), want 2 requests and 20 tokens", ep, doc.Keys[0].Endpoints[0].Aggregate, err)
	}
	if got := len(doc.Keys[0].Endpoints[0].Values); got != 2 {
		t.Fatalf("values of %s: %d, want 2 (self and epp-1; epp-2 deleted it)", ep, got)
	}
}

// TestParametersAreChecked: what cannot work is refused at start-up, naming the
// parameter or variable.
func TestParametersAreChecked(t *testing.T) {
	pluginfleet.SetEnv(t, "POD_NAME", "epp-0", "POD_IP", "127.0.0.2", "NAMESPACE", "ns")
	h := fwkplugin.NewEppHandle(context.Background(), nil)
	pd, err := fwkplugin.Registry[peerdiscovery.DNSType]("pd", params(`{"name": "`+dnsName+`"}`), h)
	if err != nil {
		t.Fatal(err)
	}
	h.AddPlugin("pd", pd)
	for _, c := range []struct{ params, want string }{
		{`{}`, "peerDiscoveryRef is required"},
		{`{"peerDiscoveryRef": "nope"}`, `peerDiscoveryRef="nope" names no peer-discovery plugin`},
		{`{"peerDiscoveryRef": "pd", "interval": "1ms"}`, "invalid interval=1ms"},
		{`{"peerDiscoveryRef": "pd", "interval": "100ms", "ttl": "50ms"}`, "invalid ttl=50ms"},
		{`{"peerDiscoveryRef": "pd", "address": "9005"}`, `invalid address="9005"`},
		{`{"peerDiscoveryRef": "pd", "tlsDir": "/nonexistent"}`, `invalid tlsDir="/nonexistent"`},
		{`{"peerDiscoveryRef": "pd", "bogus": 1}`, "unknown field"},
	} {
		_, err := peersyncer.Factory("s", params(c.params), h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.params, err, c.want)
		}
	}
	t.Setenv("EPP_PEER_SYNC_INTERVAL", "soon")
	if _, err := peersyncer.Factory("s", params(`{"peerDiscoveryRef": "pd"}`), h); err == nil || !strings.Contains(err.Error(), "EPP_PEER_SYNC_INTERVAL") {
		t.Errorf("a bad EPP_PEER_SYNC_INTERVAL: %v", err)
	}
	if s := fwkplugin.GetPluginStability(peersyncer.Type); s != fwkplugin.StabilityBeta {
		t.Errorf("stability %v, want Beta", s)
	}
	if _, ok := fwkplugin.PluginsWithPluginDependencies[peersyncer.Type]; !ok {
		t.Error("peer-syncer does not declare its dependency on the discovery plugin: the loader could build it first")
	}
}
