// Package netns runs a test binary in a network namespace of its own, with only a
// loopback interface that also holds the addresses 198.18.0.0/24 (the benchmarking
// range, RFC 2544), and, for the default route, a veth pair of which both ends are
// in the namespace: processes of the test can be given distinct, non-loopback
// addresses (which an EndpointSlice accepts, where it refuses 127.0.0.0/8) and talk
// to each other on them, and nothing the test runs can send a packet off the
// machine, since the namespace has no interface that leads anywhere.
//
// Use it first in TestMain:
//
//	func TestMain(m *testing.M) {
//		netns.Isolate("suite name")
//		...
//	}
//
// Isolate re-executes the test binary under unshare(1) (util-linux) as root, or as
// the root of a new user namespace otherwise; where neither works the test fails,
// saying why. A signal that stops the binary (SIGINT, SIGTERM, SIGHUP) stops what
// it started too (proc.StopDescendantsOnSignal): the outer process passes it on to
// the inner one and waits for it, and the inner one gets SIGTERM if the outer one
// is killed.
package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
)

// marker is set in the environment of the re-executed binary.
const marker = "EPP_TEST_NETNS"

// outAddr is the address of the interface that holds the default route.
const outAddr = "198.18.1.1/24"

// Prefix is the range the namespace's loopback holds; Addr(i) is one of it.
var Prefix = netip.MustParsePrefix("198.18.0.0/24")

// Addr is address i (1..254) of Prefix.
func Addr(i int) string {
	if i < 1 || i > 254 {
		panic(fmt.Sprintf("netns.Addr(%d): want 1..254", i))
	}
	b := Prefix.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b).String()
}

// Inside reports whether this process runs in the isolated namespace.
func Inside() bool { return os.Getenv(marker) == "1" }

// stopGrace is how long the processes a binary started get to exit after SIGTERM
// when a signal stops it.
const stopGrace = 10 * time.Second

// Isolate makes the rest of the test binary run in the isolated namespace: outside
// it, it runs the binary again inside one and exits with its status; inside, it
// brings the loopback up with Prefix on it.
func Isolate(suite string) {
	if Inside() {
		proc.StopDescendantsOnSignal(suite, stopGrace)
		if err := setUp(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: setting up the network namespace: %v\n", suite, err)
			os.Exit(1)
		}
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: needs unshare(1) (util-linux) to run in a network namespace of its own: %v\n", suite, err)
		os.Exit(1)
	}
	args := []string{"--net"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	args = append(append(args, "--", os.Args[0]), os.Args[1:]...)
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The parent-death signal goes when the thread that started the child ends:
	// this goroutine keeps its thread until the process exits.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err = cmd.Start(); err == nil {
		go func() {
			for s := range signals {
				_ = cmd.Process.Signal(s) // unshare(1) runs the binary in its own place
			}
		}()
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot run in a network namespace of its own (unshare --net, as root or in a user namespace): %v\n", suite, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func setUp() error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("needs ip(8) (iproute2): %w", err)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", Addr(1) + "/" + fmt.Sprint(Prefix.Bits()), "dev", "lo"},
		// A default route into one end of a veth pair whose other end is in this
		// namespace too, unaddressed: a kube-apiserver takes its advertise address
		// from the default route's interface (it finds none on a namespace without
		// one), and anything sent to an address outside the namespace arrives at the
		// other end and is dropped there.
		{"link", "add", "epp-out", "type", "veth", "peer", "name", "epp-sink"},
		{"addr", "add", outAddr, "dev", "epp-out"},
		{"link", "set", "epp-out", "up"},
		{"link", "set", "epp-sink", "up"},
		{"route", "add", "default", "dev", "epp-out"},
	} {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// Nothing but the loopback and the veth pair: the namespace cannot reach beyond
	// the machine.
	out, err := exec.Command(ip, "-o", "-d", "link", "show").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link show: %w: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ok := strings.Contains(line, ": lo:") ||
			((strings.Contains(line, ": epp-out@epp-sink:") || strings.Contains(line, ": epp-sink@epp-out:")) && strings.Contains(line, " veth "))
		if !ok {
			return fmt.Errorf("the namespace has an interface besides lo and its own veth pair: %s", line)
		}
	}
	return nil
}
