package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// sharedIndexConfig is syncConfig with the shared prefix index read by
// prefix-cache-scorer in place of the in-flight load: every request goes to the
// server that holds the most of its prefix, by the index (ties to the picker).
// Each server holds sharedIndexCapacity blocks: the conversations of the test fill
// every one several times over. The data layer needs a source: the model servers'
// metrics (the default one), which nothing serves (their addresses are on the
// suite's namespace's loopback: refused at once). Anti-entropy runs at its
// default interval, or at $EPP_TEST_ANTI_ENTROPY_INTERVAL ("0s" turns it off: the
// test then fails, which shows what it repairs).
func sharedIndexConfig(r *replica) string {
	interval := os.Getenv("EPP_TEST_ANTI_ENTROPY_INTERVAL")
	if interval == "" {
		interval = "1s"
	}
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: max-score-picker
  - name: peer-discovery
    type: endpointslice-peer-discovery
    parameters:
      service: epp
      debugAddress: %q
      peerSyncAddress: "%s:%d"
  - name: peer-syncer
    type: peer-syncer
    parameters:
      peerDiscoveryRef: peer-discovery
      interval: %s
  - name: shared-prefix
    type: shared-prefix-cache-producer
    parameters:
      peerSyncerRef: peer-syncer
      autoTune: false
      lruCapacityPerServer: %d
      antiEntropyInterval: %q
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: shared-prefix
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
      - pluginRef: max-score-picker
dataLayer:
  peerDiscovery:
    pluginRef: peer-discovery
  crossReplicaSyncerPluginRef: peer-syncer
  crossReplicaSyncInterval: %s
`, r.Debug, r.IP, r.SyncPort, syncInterval, sharedIndexCapacity, interval, syncInterval)
}

// sharedIndexCapacity is each model server's capacity in the shared index of
// these tests: about 2 conversations' blocks.
const sharedIndexCapacity = 50

// index is the replica's shared prefix index, as its debug address serves it.
func (r *replica) index() (sharedprefix.Index, error) {
	var st sharedprefix.Index
	code, body := getNoFail(r.Debug, sharedprefix.DebugPath("shared-prefix"))
	if code != 200 {
		return st, fmt.Errorf("GET %s: %d %s", sharedprefix.DebugPath("shared-prefix"), code, body)
	}
	err := json.Unmarshal([]byte(body), &st)
	return st, err
}

// agreement is whether the replicas hold the same, per server (the digests of
// each server's blocks and their stamps, not counts), every server full; and how
// they differ otherwise.
func agreement(rs []*replica) (bool, string) {
	var got []string
	same := true
	var first map[string]string
	for i, r := range rs {
		st, err := r.index()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", r.Pod, err)
		}
		digests := map[string]string{}
		for _, s := range st.Servers {
			digests[s.Server] = s.Digest
			same = same && s.Blocks == s.Capacity
		}
		if i == 0 {
			first = digests
		}
		same = same && len(digests) > 0 && maps.Equal(digests, first)
		got = append(got, fmt.Sprintf("%s %d blocks %s", r.Pod, st.Blocks, st.Digest))
	}
	return same, strings.Join(got, "; ")
}

// agree waits until the replicas' indexes agree (agreement), and returns how long
// it took.
func agree(t *testing.T, step string, within time.Duration, rs []*replica) time.Duration {
	t.Helper()
	return wait.ForEvery(t, within, 20*time.Millisecond, func() string {
		if ok, how := agreement(rs); !ok {
			return fmt.Sprintf("%s: the indexes differ (or a server is not full): %s", step, how)
		}
		return ""
	})
}

// chat is a conversation's first turn: a system prompt of its own (about 1,500
// estimated tokens, 23 blocks of 64) and a question.
func chat(id int) []byte {
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "Conversation %d, rule %d: answer briefly and cite the section you use. ", id, i)
	}
	body, _ := json.Marshal(map[string]any{"model": "test-model", "max_tokens": 8, "messages": []map[string]string{
		{"role": "system", "content": b.String()}, {"role": "user", "content": "What does rule 1 say?"}}})
	return body
}

// traffic routes conversations from..to-1, each through the replicas in turn (of
// those given), ended at once as a model server's answer would end them.
func traffic(t *testing.T, clients []*extproc.Client, from, to int) {
	t.Helper()
	for id := from; id < to; id++ {
		c := clients[id%len(clients)]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, err := c.Route(ctx, extproc.Call{Path: "/v1/chat/completions", Body: chat(id), ID: fmt.Sprintf("conv-%d-%d", id, time.Now().UnixNano())})
		cancel()
		if err != nil {
			t.Fatalf("conversation %d: %v", id, err)
		}
		req.End()
	}
}

// healedWithin bounds the wait for the replicas to agree after a fault heals. The
// target is 2 s (anti-entropy's interval, and an exchange at once when a
// connection comes up; the fault bench measures it); the bound asserted is
// looser, for a machine loaded by the rest of make test.
const healedWithin = 10 * time.Second

// TestRealEPPSharedIndexConvergesAfterFaults: three replicas of the real EPP share
// the prefix index while conversations are routed through them, every server's
// index full. After each fault under traffic, once it heals, the replicas hold the
// same (their per-server digests agree): one replica frozen (SIGSTOP) past the
// TTL, its peers' frames waiting in its socket (a stalled receiver's backlog); one
// that leaves the peer set and comes back (a readiness flap); its peer-sync
// connections reset (ss -K, the kernel's reset); one killed (SIGKILL) while a peer
// missed its placements (the others hold them), then started again; one started
// while a peer it reaches later published (a late peer after its bootstrap); and
// one whose clock runs 3 s behind. How long each took to agree is logged. Each was
// a path on which the log version lost placements for good; with
// EPP_TEST_ANTI_ENTROPY_INTERVAL=0s the test fails, before the first fault even
// (the placements a replica got before its pool listed the servers are dropped,
// and only anti-entropy brings them).
func TestRealEPPSharedIndexConvergesAfterFaults(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("this test dials the replicas' addresses: it must run in the suite's network namespace (netns.Isolate in TestMain)")
	}
	ss, err := exec.LookPath("ss")
	if err != nil {
		t.Fatalf("the reset fault needs ss(8) (iproute2): %v", err)
	}
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "shared-index", nil)
	if err != nil {
		t.Fatal(err)
	}
	modelServers(t, ns, 4)
	l := eppLaunch(t, eppBinary(t))
	rs := make([]*replica, 3)
	reps := make([]*eppreplica.Replica, 3)
	for i := range rs {
		rs[i] = &replica{Replica: eppreplica.New(i)}
		reps[i] = rs[i].Replica
	}
	procs := make([]*proc.Process, 3)
	start := func(l eppreplica.Launch, which ...int) {
		t.Helper()
		var these []*eppreplica.Replica
		for _, i := range which {
			these = append(these, reps[i])
		}
		ps, err := l.Start(ns, these, func(k int) string { return sharedIndexConfig(rs[which[k]]) })
		for k, p := range ps {
			if p != nil {
				i := which[k]
				procs[i], rs[i].out, rs[i].pid = p, p.Output(), p.Pid()
				t.Cleanup(func() { _ = p.Stop() })
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	listed := func(i int, ready bool) {
		t.Helper()
		var opts []slicegen.EndpointOption
		if !ready {
			opts = append(opts, slicegen.NotReady())
		}
		if err := eppreplica.WriteSyncSlice(ctx, env.Clientset, ns, i, reps[i], "test", opts...); err != nil {
			t.Fatal(err)
		}
	}
	start(l, 0, 1, 2)
	all := []int{0, 1, 2}
	writeSyncSlices(t, ns, rs, all)
	waitViews(t, "three replicas", 90*time.Second, rs, all, func(i int) string { return want(rs, i, nil) })
	clients := make([]*extproc.Client, 3)
	dial := func(which ...int) {
		for _, i := range which {
			c, err := extproc.Dial(rs[i].GRPC)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			clients[i] = c
		}
	}
	dial(0, 1, 2)
	through := func(which ...int) []*extproc.Client {
		var out []*extproc.Client
		for _, i := range which {
			out = append(out, clients[i])
		}
		return out
	}
	// A replica routes once its datastore lists the model servers.
	routes := func(which ...int) {
		t.Helper()
		wait.ForEvery(t, 60*time.Second, 200*time.Millisecond, func() string {
			for _, i := range which {
				req, err := clients[i].Route(ctx, extproc.Call{Path: "/v1/chat/completions", Body: chat(-1 - i), ID: fmt.Sprintf("probe-%d", time.Now().UnixNano())})
				if err != nil {
					return fmt.Sprintf("%s does not route yet: %v", rs[i].Pod, err)
				}
				req.End()
			}
			return ""
		})
	}
	routes(0, 1, 2)
	conv := 0
	route := func(n int, which ...int) {
		traffic(t, through(which...), conv, conv+n)
		conv += n
	}
	healed := func(fault string, which ...int) {
		t.Helper()
		var these []*replica
		for _, i := range which {
			these = append(these, rs[i])
		}
		took := agree(t, fault, healedWithin, these)
		t.Logf("%s: every replica's per-server digests equal %v after the fault healed", fault, took.Round(time.Millisecond))
	}
	route(30, 0, 1, 2)
	agree(t, "before any fault", 30*time.Second, rs)

	// 1. Frozen for 3 × the TTL while the others route: the frames they sent wait
	// in its socket, a backlog it reads at once when it resumes.
	if err := syscall.Kill(rs[2].pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	route(20, 0, 1)
	time.Sleep(3 * 3 * syncInterval)
	if err := syscall.Kill(rs[2].pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	healed("a replica frozen past the TTL", all...)

	// 2. Out of the peer set (not ready) while the others route, and back.
	listed(2, false)
	waitViews(t, "replica 2 not ready", 30*time.Second, rs, []int{0, 1}, func(i int) string { return want(rs, i, nil, 0, 1) })
	route(20, 0, 1, 2)
	listed(2, true)
	healed("a replica that left the peer set and came back", all...)

	// 3. Replica 1's peer-sync connections reset by the kernel, twice, under traffic.
	for range 2 {
		if out, err := exec.Command(ss, "-K", "src", rs[1].IP, "or", "dst", rs[1].IP).CombinedOutput(); err != nil {
			t.Fatalf("ss -K: %v\n%s", err, out)
		}
		route(10, 0, 1, 2)
	}
	healed("resets under traffic", all...)

	// 4. Replica 0 killed while replica 2, out of the peer set, misses what it
	// decided: replica 1 holds it, and gives it to replica 2. Then 0 starts again.
	listed(2, false)
	waitViews(t, "replica 2 not ready", 30*time.Second, rs, []int{0, 1}, func(i int) string { return want(rs, i, nil, 0, 1) })
	route(20, 0)
	agree(t, "replica 1 has replica 0's placements", 30*time.Second, []*replica{rs[0], rs[1]})
	if err := syscall.Kill(rs[0].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[0].Exited()
	listed(0, false)
	listed(2, true)
	healed("the placements of a replica killed before a peer had them", 1, 2)
	start(l, 0)
	listed(0, true)
	dial(0)
	routes(0)
	route(10, 0, 1, 2)
	healed("a killed replica started again", all...)

	// 5. Replica 2 restarted while replica 1 is out of the peer set and routes:
	// replica 2 fills its index from 0, and gets 1's decisions once it reaches 1.
	if err := procs[2].Stop(); err != nil {
		t.Fatal(err)
	}
	listed(2, false)
	listed(1, false)
	waitViews(t, "replicas 1 and 2 not ready", 30*time.Second, rs, []int{0}, func(i int) string { return want(rs, i, nil, 0) })
	route(20, 0, 1)
	start(l, 2)
	listed(2, true)
	dial(2)
	routes(2)
	agree(t, "replica 2 from replica 0", 30*time.Second, []*replica{rs[0], rs[2]})
	listed(1, true)
	healed("a replica that started, and a peer it reached late", all...)

	// 6. Replica 1 restarted with a clock 3 s behind: its decisions are stamped
	// 3 s older, the same way on every replica.
	if err := procs[1].Stop(); err != nil {
		t.Fatal(err)
	}
	skewed := l
	skewed.Env = append(slices.Clone(l.Env), sharedprefix.ClockOffsetEnv+"=-3s")
	start(skewed, 1)
	listed(1, true)
	dial(1)
	routes(1)
	route(30, 0, 1, 2)
	listed(2, false)
	waitViews(t, "replica 2 not ready", 30*time.Second, rs, []int{0, 1}, func(i int) string { return want(rs, i, nil, 0, 1) })
	route(10, 0, 1)
	listed(2, true)
	healed("a replica whose clock runs 3 s behind", all...)
	for _, r := range rs {
		st, _ := r.index()
		var ps []string
		for _, p := range st.Peers {
			ps = append(ps, fmt.Sprintf("%s: %d exchanges, %d repairs, %d blocks received", p.Peer, p.Exchanges, p.Repairs, p.BlocksReceived))
		}
		t.Logf("%s: %d blocks, digest %s; %s", r.Pod, st.Blocks, st.Digest, strings.Join(ps, "; "))
	}
}
