package integration_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// viewOf renders a replica's /debug/peers peers as "name:ready/serving/terminating".
func viewOf(t *testing.T, addr string) string {
	doc, err := debugPeers(t, addr)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range doc.Peers {
		out = append(out, fmt.Sprintf("%s:%v/%v/%v", p.Name, p.Ready, p.Serving, p.Terminating))
	}
	return strings.Join(out, ",")
}

// TestBinaryMembershipAlive runs bin/epp the way a leader-elected EPP would use it:
// only the leader is ready. With --epp-peer-membership=alive a replica sees the
// standbys too, with their conditions; with the default it sees only ready peers.
func TestBinaryMembershipAlive(t *testing.T) {
	bin := buildEpp(t)
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "alive", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns),
		slicegen.Pod("epp-0", "10.0.0.1", slicegen.NotReady()),                         // this replica, a standby
		slicegen.Pod("epp-1", "10.0.0.2"),                                              // the leader
		slicegen.Pod("epp-2", "10.0.0.3", slicegen.NotReady()),                         // another standby
		slicegen.Pod("epp-3", "10.0.0.4", slicegen.NotReady(), slicegen.Terminating())) // going away
	created, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	self := []string{"POD_NAME=epp-0", "POD_IP=10.0.0.1"}
	alive := startServing(t, bin, ns, []string{"--epp-peer-membership=alive"}, self...)
	ready := startServing(t, bin, ns, nil, self...)

	expect := func(step, addr, want string) {
		t.Helper()
		wait.For(t, 10*time.Second, func() string {
			if got := viewOf(t, addr); got != want {
				return fmt.Sprintf("%s: peers %q, want %q", step, got, want)
			}
			return ""
		})
	}
	expect("alive", alive, "epp-1:true/true/false,epp-2:false/false/false")
	expect("ready (default)", ready, "epp-1:true/true/false")

	// The leader steps down and epp-2 takes over.
	created.Endpoints[1].Conditions = slicegen.ConditionsOf(false, false, false)
	created.Endpoints[2].Conditions = slicegen.ConditionsOf(true, true, false)
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("alive after a failover", alive, "epp-1:false/false/false,epp-2:true/true/false")
	expect("ready after a failover", ready, "epp-2:true/true/false")
}

// TestBinaryWithoutPodNameUsesTheHostName runs bin/epp with neither POD_NAME nor a
// Pod IP: the host name (the Pod's name in Kubernetes) identifies the replica, so
// the endpoint of that name is left out.
func TestBinaryWithoutPodNameUsesTheHostName(t *testing.T) {
	bin := buildEpp(t)
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Fatalf("this machine has no host name (%v): the fallback cannot be shown", err)
	}
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "hostname", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := slicegen.Slice("epp-a", slicegen.Namespace(ns), slicegen.Pod(host, "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"))
	if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a slice with an endpoint named after the host %q: %v", host, err)
	}
	addr := startServing(t, bin, ns, nil)
	wait.For(t, 10*time.Second, func() string {
		doc, err := debugPeers(t, addr)
		if err != nil {
			return err.Error()
		}
		if doc.Self == nil || doc.Self.Name != host || len(doc.Peers) != 1 || doc.Peers[0].Name != "epp-1" {
			return fmt.Sprintf("self %+v peers %+v, want self %q and only epp-1", doc.Self, doc.Peers, host)
		}
		return ""
	})
}
