package faults_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/faultproxy"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// TestCompactedWhileCutOff: the replica's connections are reset for about a second
// (shorter than staleness detection, so its own watch retry is what recovers),
// and meanwhile a peer's slice is deleted, another peer's is created and etcd is
// compacted past every resourceVersion the replica knew. The API server serves the
// slices' watches from etcd (watch cache off for them), so the replica's re-watch
// gets 410 Gone and must re-list: within 5 s of the cut ending it lists exactly the
// new set, and the peer that stayed never vanished.
func TestCompactedWhileCutOff(t *testing.T) {
	e, err := testenv.Start(testenv.WithAPIServerFlag("watch-cache-sizes", "endpointslices.discovery.k8s.io#0"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ctx := context.Background()
	r := startReplicaOn(t, e, nil)
	before, err := r.cs.DiscoveryV1().EndpointSlices(r.ns).Get(ctx, "epp-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	s := r.sample([]string{"epp-1"})
	mustSet(t, r.proxy, faultproxy.Reset, "")
	cut := time.Now()
	if err := r.cs.DiscoveryV1().EndpointSlices(r.ns).Delete(ctx, "epp-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createSlice(t, r.cs, r.ns, "epp-c", "epp-3", "10.0.0.4")
	rev := compactEtcd(t, e.EtcdURL())

	// The premise: a watch from what the replica knew is refused as expired.
	w, err := r.cs.DiscoveryV1().EndpointSlices(r.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err == nil {
		ev, ok := <-w.ResultChan()
		w.Stop()
		if st, isStatus := ev.Object.(*metav1.Status); !ok || !isStatus || st.Code != http.StatusGone {
			t.Fatalf("a watch from resourceVersion %s after compacting at %d was not refused with 410 Gone: %v", before.ResourceVersion, rev, ev)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a watch from resourceVersion %s after compacting at %d: %v, want 410 Gone", before.ResourceVersion, rev, err)
	}

	time.Sleep(time.Until(cut.Add(time.Second)))
	mustSet(t, r.proxy, faultproxy.Pass, "")
	took := r.waitPeers(t, "after the cut", recoverWithin+10*time.Second, "epp-1", "epp-3")
	s.end()
	if took > recoverWithin {
		t.Errorf("the deleted peer left and the new one arrived %s after the cut ended, want within %s", took.Round(time.Millisecond), recoverWithin)
	}
	if s.lost != nil {
		t.Errorf("peers %v vanished from /debug/peers during the cut: the last good set must stay", s.lost)
	}
	staleAt, _ := s.stale()
	wentStale := !staleAt.IsZero()
	if d := r.doc(t); d.Stale != nil && *d.Stale {
		t.Errorf("still stale after the new set arrived: %+v", d)
	}
	t.Logf("etcd compacted at revision %d during a 1 s cut; exact set %s after the cut ended (view went stale meanwhile: %v)",
		rev, took.Round(time.Millisecond), wentStale)
	figures.Lock()
	figures.lines = append(figures.lines, fmt.Sprintf("%-28s re-watch refused (410), exact set %5.2fs after the cut ended (went stale: %v)",
		"etcd compacted in a 1 s cut", took.Seconds(), wentStale))
	figures.Unlock()
}

// compactEtcd compacts etcd's history up to its current revision (physically),
// through etcd's JSON gateway, and returns that revision.
func compactEtcd(t *testing.T, etcdURL string) int64 {
	t.Helper()
	if etcdURL == "" {
		t.Fatal("no etcd URL")
	}
	post := func(path string, body any, out any) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(etcdURL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("etcd %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("etcd %s: %v", path, err)
		}
	}
	var rangeResp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	post("/v3/kv/range", map[string]any{"key": base64.StdEncoding.EncodeToString([]byte("/registry/health-of-nothing"))}, &rangeResp)
	rev, err := strconv.ParseInt(rangeResp.Header.Revision, 10, 64)
	if err != nil || rev == 0 {
		t.Fatalf("etcd's current revision %q: %v", rangeResp.Header.Revision, err)
	}
	var compacted map[string]any
	post("/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, &compacted)
	return rev
}
