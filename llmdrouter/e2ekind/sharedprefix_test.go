//go:build e2ekind

package e2ekind_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/kindnode"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// sharedPrefixValues turns the shared prefix index on:
// router.epp.stateSync.sharedPrefixIndex.enabled (it follows installEPP's stateSync).
const sharedPrefixValues = `      sharedPrefixIndex:
        enabled: true
`

// conversation is a multi-turn chat: a long system prompt of its own, then turns.
type conversation struct {
	id    int
	turns []string
}

func newConversation(id int) *conversation {
	var b strings.Builder
	for i := range 60 { // about 6,000 characters: 1,500 estimated tokens, 23 blocks of 64
		fmt.Fprintf(&b, "Conversation %d, rule %d: answer briefly and cite the section you use. ", id, i)
	}
	return &conversation{id: id, turns: []string{b.String()}}
}

// body is the chat request of the next turn: every earlier turn, then a question.
func (c *conversation) body(question string) []byte {
	c.turns = append(c.turns, question)
	var msgs []map[string]string
	for i, t := range c.turns {
		role := "user"
		switch {
		case i == 0:
			role = "system"
		case i%2 == 0:
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": t})
	}
	b, _ := json.Marshal(map[string]any{"model": "test-model", "messages": msgs, "max_tokens": 8})
	c.turns = append(c.turns, fmt.Sprintf("An answer of conversation %d, turn %d.", c.id, len(c.turns)))
	return b
}

var calls int

// route sends one turn through the replica at addr and returns the endpoint it
// picked (the request is ended at once, as the model server's answer would).
func route(t *testing.T, clients map[string]*extproc.Client, pod string, body []byte) string {
	t.Helper()
	c := clients[pod]
	calls++
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Route(ctx, extproc.Call{Path: "/v1/chat/completions", Body: body, ID: fmt.Sprintf("shared-%d-%d", time.Now().UnixNano(), calls)})
	if err != nil {
		t.Fatalf("a turn through %s: %v", pod, err)
	}
	r.End()
	return r.Endpoint
}

// warm waits until the replica's shared index is warm (an anti-entropy exchange
// with a peer completed, or it had none) as its /debug/shared-prefix says.
func warm(t *testing.T, addr string, within time.Duration) float64 {
	t.Helper()
	var after float64
	wait.ForEvery(t, within, 100*time.Millisecond, func() string {
		resp, err := client.Get("http://" + addr + sharedprefix.DebugPath("shared-prefix"))
		if err != nil {
			return fmt.Sprintf("the shared index at %s not warm (%v)", addr, err)
		}
		var st sharedprefix.Index
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || !st.Warm {
			return fmt.Sprintf("the shared index at %s not warm (%v)", addr, err)
		}
		after = st.WarmAfterSeconds
		return ""
	})
	return after
}

// TestSharedPrefixIndexOnKind: three replicas on three nodes with the chart's
// sharedPrefixIndex switch. The turns of a conversation, each sent through another
// replica, land on the server of its first turn; with one replica's pushes dropped
// by iptables its decisions stop reaching the others, and do again once the rule is
// gone; a replica deleted comes back (a new pod), fills its index from its peers and
// routes the next turns of conversations it never saw to their servers.
func TestSharedPrefixIndexOnKind(t *testing.T) {
	c := newCluster(t, "e2e-shared-prefix")
	ids := modelServers(t, c, env(t, "IMAGE"))
	installEPP(t, c, sharedPrefixValues)
	pods := eppPods(t, c)
	clients, debug := map[string]*extproc.Client{}, map[string]string{}
	connect := func(pod string) {
		grpcAddr := c.forwardExtProc(t, pod)
		debug[pod] = c.forward(t, pod)
		cl, err := extproc.DialTLS(grpcAddr)
		if err != nil {
			t.Fatalf("ext_proc of %s: %v", pod, err)
		}
		clients[pod] = cl
		t.Cleanup(func() { cl.Close() })
	}
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
		connect(p.Name)
	}
	waitLoads(t, "every replica in sync", 60*time.Second, debug, map[string]int64{ids[0]: 0, ids[1]: 0})
	for _, n := range names {
		warm(t, debug[n], 30*time.Second)
	}
	// The first turn of each conversation: through replica conv%3 (the first request
	// of an EPP may wait for its ext_proc server's certificate).
	convs := map[int]*conversation{}
	servers := map[int]string{}
	begin := func(conv int, through string) {
		convs[conv] = newConversation(conv)
		servers[conv] = route(t, clients, through, convs[conv].body("What does rule 1 say?"))
	}
	// follow sends the next turn of conv through pod: it must land on its server.
	follow := func(step string, conv int, through string) {
		t.Helper()
		// A decision reaches the peers within the window; the turns of a chat are
		// seconds apart.
		time.Sleep(200 * time.Millisecond)
		got := route(t, clients, through, convs[conv].body(fmt.Sprintf("And turn %d?", len(convs[conv].turns))))
		if got != servers[conv] {
			t.Errorf("%s: conversation %d's turn through %s went to %s, its first turn's server is %s", step, conv, through, got, servers[conv])
		}
	}
	for conv := range 9 {
		begin(conv, names[conv%3])
	}
	for conv := range 9 {
		follow("shared index", conv, names[(conv+1)%3])
		follow("shared index", conv, names[(conv+2)%3])
	}

	// A's pushes dropped in its node for longer than the TTL, while every replica
	// routes: B's and C's decisions still reach each other; once the rule is gone,
	// what A decided meanwhile reaches them (anti-entropy), and the three indexes hold
	// the same blocks again.
	a, b, cc := pods[0], names[1], names[2]
	agree(t, "before the pushes are dropped", 60*time.Second, debug)
	restore := kindnode.InsertRule(t, a.Spec.NodeName, "FORWARD", "-s", a.Status.PodIP+"/32", "-p", "tcp", "--dport", "9005", "-j", "DROP")
	begin(100, b)
	follow("A's pushes dropped", 100, cc)
	for conv := 110; conv < 116; conv++ {
		begin(conv, names[conv%3])
	}
	time.Sleep(3 * time.Second) // past the TTL (3 × 200 ms): the connections break
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	took := agree(t, "after A's pushes flow again", 60*time.Second, debug)
	t.Logf("the indexes agree %v after the rule was removed", took.Round(time.Millisecond))
	for conv := 110; conv < 116; conv++ {
		follow("after A's pushes were dropped", conv, names[(conv+1)%3])
	}
	begin(101, a.Name)
	follow("A's pushes flow again", 101, b)
	follow("A's pushes flow again", 101, cc)

	// C deleted: its new pod fills its index from its peers and routes the turns of
	// conversations it never saw.
	if err := c.cs.CoreV1().Pods(c.ns).Delete(context.Background(), cc, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSliceGone(t, c, cc)
	var fresh string
	wait.ForEvery(t, 3*time.Minute, time.Second, func() string {
		for _, p := range eppPods3(t, c) {
			if p.Name != a.Name && p.Name != b && p.Name != cc {
				fresh = p.Name
				return ""
			}
		}
		return "no new EPP pod"
	})
	connect(fresh)
	after := warm(t, debug[fresh], 60*time.Second)
	t.Logf("the new replica %s was warm %.2fs after it started", fresh, after)
	for conv := range 9 {
		follow("a replica restarted", conv, fresh)
	}
}

// agree waits until the replicas at the debug addresses hold the same blocks in
// their shared index (the digests of /debug/shared-prefix/shared-prefix agree,
// with blocks), and returns how long it took.
func agree(t *testing.T, step string, within time.Duration, debug map[string]string) time.Duration {
	t.Helper()
	return wait.ForEvery(t, within, 100*time.Millisecond, func() string {
		var got []string
		digests := map[string]bool{}
		for pod, addr := range debug {
			resp, err := client.Get("http://" + addr + sharedprefix.DebugPath("shared-prefix"))
			if err != nil {
				return fmt.Sprintf("%s: %s: %v", step, pod, err)
			}
			var st sharedprefix.Index
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				return fmt.Sprintf("%s: %s: %v", step, pod, err)
			}
			digests[fmt.Sprintf("%d/%s", st.Blocks, st.Digest)] = st.Blocks > 0
			got = append(got, fmt.Sprintf("%s %d blocks %s", pod, st.Blocks, st.Digest))
		}
		for _, some := range digests {
			if len(digests) == 1 && some {
				return ""
			}
		}
		return fmt.Sprintf("%s: the indexes differ: %s", step, strings.Join(got, "; "))
	})
}

// eppPods3 is eppPods that waits for three ready pods (a deleted one is replaced).
func eppPods3(t *testing.T, c *cluster) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	wait.ForEvery(t, 3*time.Minute, time.Second, func() string {
		pods, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=epp"})
		if err != nil {
			return fmt.Sprintf("three ready EPP pods not back (%v)", err)
		}
		out = out[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && ready(&p) {
				out = append(out, p)
			}
		}
		if len(out) != 3 {
			return fmt.Sprintf("three ready EPP pods not back: %d ready", len(out))
		}
		return ""
	})
	return out
}
