package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestListeningPorts: the ports this process listens on, IPv4 and IPv6, and not a
// port it only dials from.
func TestListeningPorts(t *testing.T) {
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	l6, err := net.Listen("tcp", ":0") // [::] where the machine has IPv6
	if err != nil {
		t.Fatal(err)
	}
	defer l6.Close()
	conn, err := net.Dial("tcp4", l4.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ports, err := ListeningPorts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	port := func(a net.Addr) string { return strconv.Itoa(a.(*net.TCPAddr).Port) }
	if !ports[port(l4.Addr())] || !ports[port(l6.Addr())] {
		t.Errorf("ListeningPorts = %v, want %s and %s among them", ports, port(l4.Addr()), port(l6.Addr()))
	}
	if ports[port(conn.LocalAddr())] {
		t.Errorf("ListeningPorts = %v holds %s, the local port of a dialed connection", ports, port(conn.LocalAddr()))
	}
	// Another process of the same network namespace does not hold this one's sockets.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	theirs, err := ListeningPorts(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if theirs[port(l4.Addr())] {
		t.Errorf("ListeningPorts of another process = %v holds %s, this process's port", theirs, port(l4.Addr()))
	}
}

// listenEnv makes the test binary a program that listens on the address it names
// until SIGTERM (see TestMain).
const listenEnv = "PROC_TEST_LISTEN"

func TestMain(m *testing.M) {
	if os.Getenv(parentEnv) != "" {
		runParent()
		return
	}
	if addr := os.Getenv(listenEnv); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer l.Close()
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		<-stop
		return
	}
	os.Exit(m.Run())
}

// TestListen: it returns once the program listens; a program that finds its port
// taken is an error that wraps ErrAddrInUse.
func TestListen(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().String()
	l.Close()
	p, err := Listen(self, nil, []string{listenEnv + "=" + free}, []string{free}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stop := p.Supervise(t)
	if c, err := net.Dial("tcp", free); err != nil {
		t.Errorf("Listen returned, but %s refuses: %v", free, err)
	} else {
		c.Close()
	}
	stop()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	p, err = Listen(self, nil, []string{listenEnv + "=" + taken.Addr().String()}, []string{taken.Addr().String()}, 30*time.Second)
	if err == nil {
		p.Supervise(t)
	}
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("Listen on a taken port: %v, want ErrAddrInUse", err)
	}
}
