package integration_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
)

// listing is how a replica is listed in its slice, as the EndpointSlice controller
// writes it from the kubelet's probes and the pod's deletion.
type listing int

const (
	notReady listing = iota
	readyListing
	terminating
)

// list writes r's slice (epp-<pod>) with the listing l.
func list(t *testing.T, ns string, r *replica, l listing) {
	t.Helper()
	var opts []slicegen.EndpointOption
	switch l {
	case notReady:
		opts = append(opts, slicegen.NotReady())
	case terminating:
		opts = append(opts, slicegen.TerminatingServing())
	}
	s := slicegen.Slice("epp-"+r.Pod, slicegen.Namespace(ns), slicegen.Service(eppreplica.Service),
		slicegen.Ports("peer-sync", int(r.SyncPort)), slicegen.Pod(r.Pod, r.IP, opts...))
	if err := eppreplica.ApplySlice(context.Background(), env.Clientset, s, "test"); err != nil {
		t.Fatal(err)
	}
}

// unlist deletes r's slice (its pod is gone).
func unlist(t *testing.T, ns string, r *replica) {
	t.Helper()
	err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), "epp-"+r.Pod, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// rejections is every peer-sync rejection r counted, by reason ("" for none).
func (r *replica) rejections() (string, error) {
	doc, err := r.syncDoc()
	if err != nil {
		return "", err
	}
	var out []string
	for reason, n := range doc.Rejections {
		out = append(out, reason+"="+strconv.FormatFloat(n, 'f', -1, 64))
	}
	sort.Strings(out)
	return strings.Join(out, " "), nil
}

func noRejections(t *testing.T, step string, rs []*replica) {
	t.Helper()
	for _, r := range rs {
		got, err := r.rejections()
		if err != nil {
			t.Fatalf("%s: %s: %v", step, r.Pod, err)
		}
		if got != "" {
			t.Errorf("%s: %s counted peer-sync rejections: %s", step, r.Pod, got)
		}
	}
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestRealEPPCleanStartAndRollingReplacementCountNoRejection: 8 replicas of the real
// EPP with peer-syncer, started at once and listed as the EndpointSlice controller
// lists starting pods (not ready, then ready), are all in sync and count no
// peer-sync rejection; then 3 of them are replaced one at a time as a rolling update
// with membership ready does it: the new replica runs listed not ready for longer than
// the peers' handshake timeout, is listed ready, then the old one is listed
// terminating, leaves the slice and stops. After each step every replica is in sync
// and none counted a rejection (before issue 34, each start and each replacement
// counted unknown-source rejections on the peers).
func TestRealEPPCleanStartAndRollingReplacementCountNoRejection(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("this test dials the replicas' addresses: it must run in the suite's network namespace (netns.Isolate in TestMain)")
	}
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "rollout", nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := modelServers(t, ns, 2)
	idle := map[string]int64{ids[0]: 0, ids[1]: 0}
	l := eppLaunch(t, eppBinary(t))
	// Listed not ready while they start, as the EndpointSlice controller lists pods.
	rs := make([]*replica, 8)
	for i := range rs {
		rs[i] = &replica{Replica: eppreplica.New(i)}
		list(t, ns, rs[i], notReady)
	}
	if err := launch(t, l, ns, rs, syncConfig); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		list(t, ns, r, readyListing)
	}
	took := waitLoads(t, "8 replicas started at once, in sync", 60*time.Second, rs, indexes(len(rs)), idle)
	t.Logf("8 replicas in sync %v after they were listed ready", took.Round(time.Millisecond))
	noRejections(t, "clean start", rs)

	for i := range 3 {
		old := rs[i]
		next := []*replica{{Replica: eppreplica.New(len(rs) + i)}}
		list(t, ns, next[0], notReady)
		if err := launch(t, l, ns, next, syncConfig); err != nil {
			t.Fatal(err)
		}
		// Not ready for longer than a peer holds a connection for its listing.
		time.Sleep(3 * time.Second)
		list(t, ns, next[0], readyListing)
		with := append([]*replica{next[0]}, rs...)
		waitLoads(t, fmt.Sprintf("step %d: %s ready", i, next[0].Pod), 30*time.Second, with, indexes(len(with)), idle)
		list(t, ns, old, terminating)
		time.Sleep(500 * time.Millisecond)
		unlist(t, ns, old)
		noRejections(t, fmt.Sprintf("step %d: %s leaving", i, old.Pod), []*replica{old})
		old.stop()
		rs[i] = next[0]
		waitLoads(t, fmt.Sprintf("step %d: %s replaced by %s", i, old.Pod, next[0].Pod), 30*time.Second, rs, indexes(len(rs)), idle)
		noRejections(t, fmt.Sprintf("step %d: %s replaced by %s", i, old.Pod, next[0].Pod), rs)
	}
}
