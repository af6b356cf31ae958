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
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	attrconcurrency "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	"k8s.io/apimachinery/pkg/types"

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

// ep is the endpoint (namespace/name) the tests send requests to.
const ep = "llm/vllm-0"

// publish does what llm-d-router's cross-replica publisher does each interval: Set
// the contributor's fresh local snapshot of ep (its Supply).
func (r *eppReplica) publish(t *testing.T) {
	t.Helper()
	spec := r.Inflight.CrossReplicaState()
	if err := r.Syncer.Set(context.Background(), spec.StateKey, ep, spec.Supply(ep)()); err != nil {
		t.Fatal(err)
	}
}

var requestIDs int

// send counts requests to endpoint (namespace/name) in r's in-flight producer, as
// the EPP does when it picks the endpoint (PreRequest), and returns them.
func (r *eppReplica) send(t *testing.T, endpoint string, requests int) []*fwksched.InferenceRequest {
	t.Helper()
	ns, name, _ := strings.Cut(endpoint, "/")
	ep := fwksched.NewEndpoint(&fwkdl.EndpointMetadata{ID: types.NamespacedName{Namespace: ns, Name: name}, Name: name}, &fwkdl.Metrics{}, nil)
	var out []*fwksched.InferenceRequest
	for range requests {
		requestIDs++
		res := &fwksched.SchedulingResult{PrimaryProfileName: "default", ProfileResults: map[string]*fwksched.ProfileRunResult{"default": {TargetEndpoints: []fwksched.Endpoint{ep}}}}
		req := &fwksched.InferenceRequest{RequestID: fmt.Sprintf("req-%d", requestIDs), TargetModel: "m", SchedulingResult: res}
		if err := r.Inflight.PreRequest(context.Background(), req, res); err != nil {
			t.Fatal(err)
		}
		out = append(out, req)
	}
	return out
}

// end ends the requests, as the EPP does at the end of their responses.
func (r *eppReplica) end(reqs []*fwksched.InferenceRequest) {
	for _, req := range reqs {
		r.Inflight.ResponseBody(context.Background(), req, &requestcontrol.Response{EndOfStream: true}, nil)
	}
}

// load is what the runtime's attribute closure reads: Get with the contributor's
// own Aggregate (whose type assertions must hold for the peers' values); -1 when
// it has none.
func (r *eppReplica) load() int64 {
	spec := r.Inflight.CrossReplicaState()
	v, ok, err := r.Syncer.Get(context.Background(), spec.StateKey, ep, spec.Aggregate)
	if err != nil || !ok {
		return -1
	}
	l := v.(*attrconcurrency.InFlightLoad)
	return l.Requests
}

// waitLoad waits until every replica of rs reads want in-flight requests on ep.
func waitLoad(t *testing.T, rs []*eppReplica, want int64) {
	t.Helper()
	wait.For(t, 10*time.Second, func() string {
		var wrong []string
		for _, r := range rs {
			if got := r.load(); got != want {
				wrong = append(wrong, fmt.Sprintf("%s=%d", r.Name, got))
			}
		}
		if len(wrong) > 0 {
			return fmt.Sprintf("%s: want %d in-flight requests on every replica, got %s", ep, want, strings.Join(wrong, " "))
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
	var first []*fwksched.InferenceRequest
	for i, r := range rs {
		reqs := r.send(t, ep, i+1)
		if i == 0 {
			first = reqs
		}
		r.publish(t)
	}
	waitLoad(t, rs, 6)
	rs[0].end(first)
	rs[0].publish(t)
	waitLoad(t, rs, 5)
	// Delete on replica 2 (the endpoint left its datastore): its share goes everywhere.
	if err := rs[2].Syncer.Delete(context.Background(), rs[2].Inflight.CrossReplicaState().StateKey, ep); err != nil {
		t.Fatal(err)
	}
	waitLoad(t, rs[:2], 2)

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
	if err := json.Unmarshal(doc.Keys[0].Endpoints[0].Aggregate, &agg); err != nil || agg.Requests != 2 {
		t.Fatalf("aggregate of %s: %s (%v), want 2 requests", ep, doc.Keys[0].Endpoints[0].Aggregate, err)
	}
	if got := len(doc.Keys[0].Endpoints[0].Values); got != 2 {
		t.Fatalf("values of %s: %d, want 2 (self and epp-1; epp-2 deleted it)", ep, got)
	}
}

// TestOwnLoadIsReadLive: a request routed through a replica counts in that
// replica's own in-flight load at once, as it does without a syncer, not at the
// runtime's next Set (up to an interval later: 800 ms of a simulated server's
// time in the routing bench, about one request's life); the peers' values are
// added as of their last push. Before, a replica read its own value as of its last
// Set, blind to what it had just sent.
func TestOwnLoadIsReadLive(t *testing.T) {
	rs := startReplicas(t, 2, `{"peerDiscoveryRef": "peer-discovery", "interval": "1s"}`)
	rs[1].send(t, ep, 2)
	for _, r := range rs {
		r.publish(t)
	}
	waitLoad(t, rs, 2)
	reqs := rs[0].send(t, ep, 3)
	if got := rs[0].load(); got != 5 {
		t.Errorf("just after 3 requests routed through it, the replica reads %d in flight, want 5 (its own 3 at once, its peer's 2)", got)
	}
	rs[0].end(reqs[:1])
	if got := rs[0].load(); got != 4 {
		t.Errorf("just after one of them ended, the replica reads %d in flight, want 4", got)
	}
	rs[0].publish(t) // the runtime's next interval: the peer gets the 2
	waitLoad(t, rs[1:], 4)
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
		{`{"peerDiscoveryRef": "pd", "readTick": "500us"}`, "invalid readTick=500µs"},
		{`{"peerDiscoveryRef": "pd", "readTick": "1s"}`, "invalid readTick=1s"},
		{`{"peerDiscoveryRef": "pd", "address": "9005"}`, `invalid address="9005"`},
		{`{"peerDiscoveryRef": "pd", "tlsDir": "/nonexistent"}`, `invalid tlsDir="/nonexistent"`},
		{`{"peerDiscoveryRef": "pd", "bogus": 1}`, "unknown field"},
	} {
		_, err := peersyncer.Factory("s", params(c.params), h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.params, err, c.want)
		}
	}
	for params_, want := range map[string]time.Duration{`{"peerDiscoveryRef": "pd", "address": "127.0.0.2:0"}`: peersyncer.DefaultReadTick,
		`{"peerDiscoveryRef": "pd", "address": "127.0.0.2:0", "readTick": "10ms"}`: 10 * time.Millisecond} {
		h := fwkplugin.NewEppHandle(t.Context(), nil) // one syncer per discovery plugin, stopped with the test
		pd, err := fwkplugin.Registry[peerdiscovery.DNSType]("pd", params(`{"name": "`+dnsName+`"}`), h)
		if err != nil {
			t.Fatal(err)
		}
		h.AddPlugin("pd", pd)
		p, err := peersyncer.Factory("s", params(params_), h)
		if err != nil {
			t.Fatalf("%s: %v", params_, err)
		}
		if got := p.(*peersyncer.Plugin).Syncer().ReadTick(); got != want {
			t.Errorf("%s: the syncer reads at a tick of %v, want %v", params_, got, want)
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
