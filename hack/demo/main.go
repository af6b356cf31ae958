// Command demo shows peer discovery working: it starts a real kube-apiserver and etcd
// (bin/k8s), runs one bin/epp process per replica of an EPP "Deployment" whose
// EndpointSlice it edits like the EndpointSlice controller would, and prints every
// replica's own /debug/peers view while the replicas scale 3 -> 5 -> 2 and a pod is
// replaced. All traffic stays on 127.0.0.1; the pod IPs are never dialed.
//
// Usage: go run ./hack/demo -epp bin/epp
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/testsupport/testenv"
)

type replica struct {
	name, ip, metrics string
	cmd               *exec.Cmd
}

type demo struct {
	env      *testenv.Env
	bin, ns  string
	logDir   string
	replicas []*replica
	nextID   int
}

func main() {
	bin := flag.String("epp", "bin/epp", "path of the epp binary")
	flag.Parse()
	if err := run(*bin); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(bin string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("== starting a real kube-apiserver and etcd from bin/k8s")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	logDir, err := os.MkdirTemp("", "epp-demo-")
	if err != nil {
		return err
	}
	d := &demo{env: env, bin: bin, ns: "demo", logDir: logDir}
	defer d.stopAll()
	if _, err := env.Clientset.CoreV1().Namespaces().Create(ctx, nsObject(d.ns), metav1.CreateOptions{}); err != nil {
		return err
	}

	steps := []struct {
		title string
		apply func() error
	}{
		{"3 replicas with --enable-peer-discovery --epp-peer-service=epp", func() error { return d.scaleTo(ctx, 3) }},
		{"scale 3 -> 5", func() error { return d.scaleTo(ctx, 5) }},
		{"scale 5 -> 2", func() error { return d.scaleTo(ctx, 2) }},
		{"delete the oldest pod (its Deployment replaces it)", func() error { return d.replaceFirst(ctx) }},
	}
	for _, s := range steps {
		fmt.Printf("\n== %s\n", s.title)
		start := time.Now()
		if err := s.apply(); err != nil {
			return err
		}
		if err := d.waitConverged(ctx, 30*time.Second); err != nil {
			return err
		}
		fmt.Printf("every replica sees exactly the others after %s:\n", time.Since(start).Round(time.Millisecond))
		d.printTable()
	}
	fmt.Printf("\n== done; replica logs were in %s (removed)\n", logDir)
	return os.RemoveAll(logDir)
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// scaleTo starts or stops replicas (newest first) and rewrites the Service's slice.
func (d *demo) scaleTo(ctx context.Context, n int) error {
	for len(d.replicas) < n {
		if err := d.start(); err != nil {
			return err
		}
	}
	for len(d.replicas) > n {
		last := d.replicas[len(d.replicas)-1]
		d.replicas = d.replicas[:len(d.replicas)-1]
		stopProcess(last)
	}
	return d.writeSlice(ctx)
}

func (d *demo) replaceFirst(ctx context.Context) error {
	first := d.replicas[0]
	d.replicas = d.replicas[1:]
	stopProcess(first)
	if err := d.start(); err != nil {
		return err
	}
	return d.writeSlice(ctx)
}

func (d *demo) start() error {
	id := d.nextID
	d.nextID++
	r := &replica{name: fmt.Sprintf("epp-%d", id), ip: fmt.Sprintf("10.244.0.%d", 10+id), metrics: freeAddr()}
	logFile, err := os.Create(filepath.Join(d.logDir, r.name+".log"))
	if err != nil {
		return err
	}
	r.cmd = exec.Command(d.bin, "--enable-peer-discovery", "--epp-peer-service=epp",
		"--kubeconfig="+d.env.Kubeconfig, "--metrics-bind-address="+r.metrics, "--health-probe-bind-address="+freeAddr())
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POD_NAME=" + r.name, "POD_IP=" + r.ip, "POD_IPS=" + r.ip, "NAMESPACE=" + d.ns}
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.bin, err)
	}
	d.replicas = append(d.replicas, r)
	return nil
}

func (d *demo) writeSlice(ctx context.Context) error {
	opts := []slicegen.SliceOption{slicegen.Namespace(d.ns), slicegen.Ports("http", 9002, "peer-sync", 9005)}
	for _, r := range d.replicas {
		opts = append(opts, slicegen.Pod(r.name, r.ip))
	}
	s := slicegen.Slice("epp-x7k2p", opts...)
	api := d.env.Clientset.DiscoveryV1().EndpointSlices(d.ns)
	cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		_, err = api.Create(ctx, &s, metav1.CreateOptions{})
		return err
	}
	cur.Endpoints, cur.Ports = s.Endpoints, s.Ports
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// view fetches a replica's /debug/peers as "name" list.
func view(r *replica) ([]string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + r.metrics + "/debug/peers")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc peers.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	if doc.Synced == nil || !*doc.Synced {
		return nil, fmt.Errorf("not synced")
	}
	out := []string{}
	for _, p := range doc.Peers {
		out = append(out, fmt.Sprintf("%s (%s:%d)", p.Name, p.Address, p.Port))
	}
	return out, nil
}

func (d *demo) want(self *replica) []string {
	out := []string{}
	for _, r := range d.replicas {
		if r != self {
			out = append(out, fmt.Sprintf("%s (%s:9005)", r.name, r.ip))
		}
	}
	slices.Sort(out)
	return out
}

// waitConverged polls every replica (at most 10 requests per second each, bounded by
// timeout) until each one's view is exactly the other replicas.
func (d *demo) waitConverged(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pending := ""
		for _, r := range d.replicas {
			got, err := view(r)
			if err != nil || !slices.Equal(got, d.want(r)) {
				pending = fmt.Sprintf("%s sees %v (err %v), want %v", r.name, got, err, d.want(r))
				break
			}
		}
		if pending == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not converged after %s: %s (logs in %s)", timeout, pending, d.logDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *demo) printTable() {
	fmt.Printf("  %-8s %-14s %s\n", "REPLICA", "POD IP", "ITS PEERS (from its own /debug/peers)")
	for _, r := range d.replicas {
		got, _ := view(r)
		fmt.Printf("  %-8s %-14s %s\n", r.name, r.ip, strings.Join(got, ", "))
	}
}

func (d *demo) stopAll() {
	for _, r := range d.replicas {
		stopProcess(r)
	}
	d.replicas = nil
}

func stopProcess(r *replica) {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
