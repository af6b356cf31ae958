package integration_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// unreachableGauge matches the gauge's line, whatever its discovery label.
var unreachableGauge = regexp.MustCompile(`^epp_peer_discovery_unreachable_peers\{[^}]*\} (\S+)$`)

// TestBinaryProbesPeers: three replicas on 127.0.0.1 list each other in a peers
// file, each on its own peer-sync port; replicas b and c answer there
// (--peer-sync-bind-address), d's port is closed. Replica a probes every 200 ms:
// its /debug/peers says b and c reachable and d not, the gauge counts one, and d
// stays a peer. When something listens on d's port, d is reachable within two
// intervals; when c stops, c is unreachable within two intervals and stays a peer.
func TestBinaryProbesPeers(t *testing.T) {
	bin := buildEpp(t)
	const interval = 200 * time.Millisecond
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	syncB, syncC, syncD := freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	peersPath := filepath.Join(dir, "peers.yaml")
	if err := os.WriteFile(peersPath, []byte(fmt.Sprintf(`peers:
- {name: epp-a, address: 127.0.0.1, port: 1}
- {name: epp-b, address: 127.0.0.1, port: %s}
- {name: epp-c, address: 127.0.0.1, port: %s}
- {name: epp-d, address: 127.0.0.1, port: %s}
`, port(syncB), port(syncC), port(syncD))), 0o644); err != nil {
		t.Fatal(err)
	}
	replica := func(name, peerSync string, extra ...string) (metrics string, out *capture.Buffer, stop func()) {
		metrics = freeAddr(t)
		args := append([]string{"--enable-peer-discovery", "--epp-peer-file=" + peersPath,
			"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + freeAddr(t)}, extra...)
		if peerSync != "" {
			args = append(args, "--peer-sync-bind-address="+peerSync)
		}
		out, stop = startStoppableBinary(t, bin, args, minimalEnv(t, "POD_NAME="+name, "NAMESPACE=edge"))
		return metrics, out, stop
	}
	a, aOut, _ := replica("epp-a", "", "--epp-peer-probe-interval="+interval.String())
	replica("epp-b", syncB)
	_, _, stopC := replica("epp-c", syncC)

	// b answers its peer-sync port with its identity.
	wait.For(t, 10*time.Second, func() string {
		conn, err := net.DialTimeout("tcp", syncB, time.Second)
		if err != nil {
			return err.Error()
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if line != "epp-peer-discovery edge/epp-b\n" {
			return fmt.Sprintf("peer-sync answered %q", line)
		}
		return ""
	})

	// reach renders a's view: name=reachable for each peer, and the gauge.
	reach := func() string {
		doc, err := debugPeers(t, a)
		if err != nil {
			return err.Error()
		}
		var parts []string
		for _, p := range doc.Peers {
			switch {
			case p.Reachable == nil:
				parts = append(parts, p.Name+"=unprobed")
			case *p.Reachable && p.ConnectSeconds != nil && p.LastProbe != nil:
				parts = append(parts, p.Name+"=reachable")
			case !*p.Reachable && p.ProbeError != "" && p.LastProbe != nil:
				parts = append(parts, p.Name+"=unreachable")
			default:
				parts = append(parts, p.Name+"=inconsistent")
			}
		}
		_, m := get(t, a, "/metrics")
		for _, line := range strings.Split(m, "\n") {
			if m := unreachableGauge.FindStringSubmatch(line); m != nil {
				parts = append(parts, "gauge="+m[1])
			}
		}
		return strings.Join(parts, " ")
	}
	expect := func(step, want string, within time.Duration) {
		t.Helper()
		wait.For(t, within, func() string {
			if got := reach(); got != want {
				return fmt.Sprintf("%s: %s, want %s", step, got, want)
			}
			return ""
		})
	}
	expect("start", "epp-b=reachable epp-c=reachable epp-d=unreachable gauge=1", 5*time.Second)
	if doc, _ := debugPeers(t, a); doc.Peers[2].ProbeError != "refused" {
		t.Errorf("the closed port's error: %q", doc.Peers[2].ProbeError)
	}

	// Something answers on d's port now: reachable within two intervals (and the
	// time it takes to read the document).
	l, err := net.Listen("tcp", syncD)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	expect("d listens", "epp-b=reachable epp-c=reachable epp-d=reachable gauge=0", 2*interval+time.Second)

	// c stops: unreachable within two intervals, and still a peer.
	stopC()
	expect("c stopped", "epp-b=reachable epp-c=unreachable epp-d=reachable gauge=1", 2*interval+time.Second)
	if !strings.Contains(aOut.String(), `"msg":"peer unreachable","peer":"edge/epp-c"`) {
		t.Errorf("no log line for c becoming unreachable:\n%s", aOut.String())
	}
}
