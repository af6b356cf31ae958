package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peercheck"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

// TestCheckPeers runs what `helm test` runs (epp check-peers) against three replicas
// listed in slices with pod IPs 10.99.0.x (which the API server wants), each with its
// own metrics port; the HTTP client's dialer sends what is meant for 10.99.0.x:port
// to 127.0.0.1:port, where the replica listens, and refuses any other address. The
// check passes while the replicas agree, and fails, naming the replica, when a
// listed replica does not answer.
func TestCheckPeers(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "check", nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(i int, addr string) {
		t.Helper()
		_, port, _ := strings.Cut(addr, ":")
		p, _ := strconv.Atoi(port)
		s := slicegen.Slice(fmt.Sprintf("epp-r%d", i), slicegen.Namespace(ns), slicegen.Ports("http-metrics", p, "peer-sync", 9005),
			slicegen.Pod(fmt.Sprintf("epp-%d", i), fmt.Sprintf("10.99.0.%d", i+1)))
		if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		addr := testenv.FreeAddr()
		create(i, addr)
		startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--metrics-bind-address=" + addr},
			map[string]string{"NAMESPACE": ns, "POD_NAME": fmt.Sprintf("epp-%d", i), "POD_IP": fmt.Sprintf("10.99.0.%d", i+1)})
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasPrefix(host, "10.99.0.") {
			return nil, fmt.Errorf("test dialer: refusing %s: only the replicas' 10.99.0.x addresses are mapped to 127.0.0.1", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}}}
	opts := peercheck.Options{Service: "epp", Namespace: ns, PortName: "http-metrics", Timeout: 20 * time.Second, Interval: 200 * time.Millisecond}
	var out bytes.Buffer
	if err := peercheck.Run(ctx, env.Clientset, client, opts, &out); err != nil {
		t.Fatalf("check-peers with three agreeing replicas: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok: 3 replicas") {
		t.Fatalf("check-peers output: %s", out.String())
	}

	// A fourth replica is listed but does not answer (and the others list it).
	create(3, testenv.FreeAddr())
	opts.Timeout = 2 * time.Second
	out.Reset()
	err = peercheck.Run(ctx, env.Clientset, client, opts, &out)
	if err == nil || !strings.Contains(err.Error(), ns+"/epp-3:") {
		t.Fatalf("check-peers with a silent replica = %v, want an error naming it\n%s", err, out.String())
	}
}

// TestCheckPeersUnderLeaderElection: three replicas with membership alive, of which
// only the leader is a ready endpoint (the standbys of llm-d-router's leader
// election are not ready), as the chart's helm test meets them with
// router.epp.leaderElection and peerDiscovery.membership=alive. Every replica lists
// the two others. check-peers with the replicas' membership passes; counting only
// ready endpoints it fails as the chart's test used to ("peers [...], want []").
func TestCheckPeersUnderLeaderElection(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "check-alive", nil)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	for i := range 3 {
		addr := testenv.FreeAddr()
		_, port, _ := strings.Cut(addr, ":")
		ip := fmt.Sprintf("10.99.1.%d", i+1)
		ports[ip] = port
		p, _ := strconv.Atoi(port)
		var opts []slicegen.EndpointOption
		if i > 0 {
			opts = append(opts, slicegen.NotReady())
		}
		s := slicegen.Slice(fmt.Sprintf("epp-r%d", i), slicegen.Namespace(ns), slicegen.Ports("http-peers", p, "peer-sync", 9005),
			slicegen.Pod(fmt.Sprintf("epp-%d", i), ip, opts...))
		if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		startApp(t, env.Config, []string{"--enable-peer-discovery", "--epp-peer-service=epp", "--epp-peer-membership=alive", "--metrics-bind-address=" + addr},
			map[string]string{"NAMESPACE": ns, "POD_NAME": fmt.Sprintf("epp-%d", i), "POD_IP": ip})
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || ports[host] != port {
			return nil, fmt.Errorf("test dialer: refusing %s: only the replicas' 10.99.1.x addresses are mapped to 127.0.0.1", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}}}
	flags, err := peercheck.Flags([]string{"--service=epp", "--namespace=" + ns, "--port-name=http-peers", "--membership=alive", "--timeout=20s", "--interval=200ms"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := peercheck.Run(ctx, env.Clientset, client, flags, &out); err != nil {
		t.Fatalf("check-peers --membership=alive: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok: 3 replicas") {
		t.Fatalf("check-peers output: %s", out.String())
	}

	flags.Membership = ""
	flags.Timeout = time.Second
	out.Reset()
	err = peercheck.Run(ctx, env.Clientset, client, flags, &out)
	if err == nil || !strings.Contains(err.Error(), ns+"/epp-0: peers ["+ns+"/epp-1 "+ns+"/epp-2], want []") {
		t.Fatalf("check-peers counting ready endpoints only = %v, want the leader's list refused\n%s", err, out.String())
	}
}
