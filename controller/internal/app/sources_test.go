package app_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/dnsserver"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/staticsource"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// TestANewSourceIsOnePackageAndOneLine registers the static source with one line
// and runs it through the binary's wiring: /debug/peers, /readyz, the snapshot file
// and the metrics all work for it without any other change.
func TestANewSourceIsOnePackageAndOneLine(t *testing.T) {
	list := []peers.PeerMetadata{
		{Namespace: "ns", Name: "epp-0", Address: "10.0.0.1", Port: 9005, Ready: true, Serving: true},
		{Namespace: "ns", Name: "epp-1", Address: "10.0.0.2", Port: 9005, Ready: true, Serving: true},
		{Namespace: "ns", Name: "epp-2", Address: "fd00::3", Port: 7000, Ready: true, Serving: true},
	}
	// The one registration line: its spec (a flag, and how to build the source).
	sources := append(app.DefaultSources(), staticsource.Spec(list))

	snap := filepath.Join(t.TempDir(), "peers.json")
	opts, err := app.ParseSources([]string{"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
		"--enable-peer-discovery", "--epp-peer-static=yes", "--epp-peer-snapshot-file=" + snap},
		env("POD_NAME", "epp-0", "NAMESPACE", "ns"), io.Discard, sources)
	if err != nil {
		t.Fatal(err)
	}
	a := runApp(t, opts)

	get := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.Until(t, 10*time.Second, "the static source to make the replica ready", func() bool {
		code, _ := get(a.ProbeAddr(), "/readyz")
		return code == http.StatusOK
	})
	doc := peerdoc.Must(t, a.MetricsAddr())
	var ids []string
	for _, p := range doc.Peers {
		ids = append(ids, p.ID+"@"+p.Address)
	}
	if doc.Source != "static" || doc.Synced == nil || !*doc.Synced || strings.Join(ids, ",") != "ns/epp-1@10.0.0.2,ns/epp-2@fd00::3" {
		t.Fatalf("/debug/peers of the static source: %+v", doc)
	}
	wait.Until(t, 10*time.Second, "a snapshot of the static source's peers", func() bool {
		b, err := os.ReadFile(snap)
		return err == nil && strings.Contains(string(b), `"source": "static"`) && strings.Contains(string(b), "epp-2")
	})
	if _, m := get(a.MetricsAddr(), "/metrics"); !strings.Contains(m, `epp_peer_discovery_peers{discovery="static"} 2`) || !strings.Contains(m, `epp_peer_discovery_synced{discovery="static"} 1`) {
		t.Fatal("/metrics does not follow the static source")
	}
}

// TestDNSSourceInTheBinary runs the binary's wiring with --epp-peer-dns against a
// DNS server of the test's own: the DNS source came with one package and one line
// in DefaultSources, its flags, its failure reason in the metrics.
func TestDNSSourceInTheBinary(t *testing.T) {
	srv, err := dnsserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const name = "_peer-sync._tcp.epp-peers.ns.svc.cluster.local"
	for i, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		host := fmt.Sprintf("epp-%d.epp-peers.ns.svc.cluster.local", i)
		srv.SetAddrs(host, a)
	}
	srv.SetSRV(name, dnsserver.SRV{Target: "epp-0.epp-peers.ns.svc.cluster.local", Port: 9005},
		dnsserver.SRV{Target: "epp-1.epp-peers.ns.svc.cluster.local", Port: 9005}, dnsserver.SRV{Target: "epp-2.epp-peers.ns.svc.cluster.local", Port: 9005})
	a := startApp(t, "--enable-peer-discovery", "--epp-peer-dns="+name, "--epp-peer-dns-server="+srv.Addr(), "--epp-peer-dns-interval=1s")
	doc := peerdoc.WaitSynced(t, a.MetricsAddr(), 10*time.Second)
	var ids []string
	for _, p := range doc.Peers {
		ids = append(ids, p.ID+"@"+p.Address)
	}
	if doc.Source != "dns" || strings.Join(ids, ",") != "ns/epp-1@10.0.0.2,ns/epp-2@10.0.0.3" {
		t.Fatalf("/debug/peers of the DNS source: %+v", doc)
	}
	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`epp_peer_discovery_peers{discovery="dns"} 2`, `epp_peer_discovery_errors_total{discovery="dns",reason="lookup"} 0`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestARegisteredSourceTakesPartInTheFlagChecks: its flag is refused with another
// source's, and named when no source is set.
func TestARegisteredSourceTakesPartInTheFlagChecks(t *testing.T) {
	sources := append(app.DefaultSources(), staticsource.Spec(nil))
	_, err := app.ParseSources([]string{"--enable-peer-discovery"}, env("POD_NAME", "epp-0"), io.Discard, sources)
	if err == nil || !strings.Contains(err.Error(), "--epp-peer-static=<anything>") || !strings.Contains(err.Error(), "--epp-peer-file=<path>") {
		t.Fatalf("no source set: %v", err)
	}
	_, err = app.ParseSources([]string{"--enable-peer-discovery", "--epp-peer-file=/p", "--epp-peer-static=x"}, env("POD_NAME", "epp-0"), io.Discard, sources)
	if err == nil || !strings.Contains(err.Error(), "--epp-peer-file and --epp-peer-static are mutually exclusive") {
		t.Fatalf("two sources set: %v", err)
	}
}

func TestAnUnregisteredSourceIsAnError(t *testing.T) {
	opts := app.Options{EnablePeerDiscovery: true, PeerSource: "nowhere", MetricsAddr: "127.0.0.1:0", ProbeAddr: "127.0.0.1:0"}
	if _, err := app.New(opts, nil, logr.Discard()); err == nil || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Fatalf("New with an unknown source: %v", err)
	}
}
