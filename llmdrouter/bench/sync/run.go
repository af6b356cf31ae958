package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/cputime"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

type runOptions struct {
	replicas  []int
	endpoints []int
	window    time.Duration
	warmup    time.Duration
	interval  time.Duration
	write     string
	smoke     bool
	decisions int
	change    float64
	procs     int
}

// result is one (syncer, replicas, endpoints) measurement.
type result struct {
	syncer     string
	replicas   int
	endpoints  int
	cpu        float64 // the measured replica's, as a share of one core
	bytesPerS  float64 // sent, per replica
	perEPPush  float64 // bytes per endpoint per push
	visibleP50 time.Duration
	visibleP99 time.Duration
	samples    int
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	replicas := fs.String("replicas", "3,10,30", "replica counts")
	endpoints := fs.String("endpoints", "100,1000", "endpoint counts")
	var o runOptions
	fs.DurationVar(&o.window, "window", 10*time.Second, "measurement window per case")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "time after every replica is in sync before measuring")
	fs.DurationVar(&o.interval, "interval", 200*time.Millisecond, "crossReplicaSyncInterval")
	fs.StringVar(&o.write, "write", "", "write the table into this markdown file, between the sync-bench markers")
	fs.BoolVar(&o.smoke, "smoke", false, "a short run that fails when the syncer does not share state")
	fs.IntVar(&o.procs, "gomaxprocs", 2, "GOMAXPROCS of the measured replica")
	fs.Float64Var(&o.change, "change", 1, "the share of endpoints whose value changes every interval (1: all, the most a push carries)")
	fs.IntVar(&o.decisions, "decisions", 0, "scheduling decisions a second per replica, each reading every endpoint's aggregate (0: none; the cost of a read is BenchmarkGet's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.replicas, err = parseInts(*replicas); err != nil {
		return fmt.Errorf("--replicas=%w", err)
	}
	if o.endpoints, err = parseInts(*endpoints); err != nil {
		return fmt.Errorf("--endpoints=%w", err)
	}
	for _, n := range o.replicas {
		if n > 200 {
			return fmt.Errorf("--replicas: %d is more than the namespace's addresses allow (200)", n)
		}
	}
	// What the table measured (the replicas run this binary): before the namespace.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	stamp, err := markdown.StampOf(self)
	if err != nil {
		return err
	}
	netns.Isolate("syncbench")
	env, err := testenv.Start(testenv.WithoutFsync())
	if err != nil {
		return err
	}
	defer env.Stop()
	start := time.Now()
	var results []result
	for _, n := range o.replicas {
		for _, e := range o.endpoints {
			// Alternate which syncer goes first, so that neither always runs on a
			// warmer or a colder API server.
			order := []string{"local", "peer"}
			if len(results)/2%2 == 1 {
				order = []string{"peer", "local"}
			}
			for _, syncer := range order {
				r, err := measure(env, o, syncer, n, e)
				if err != nil {
					return fmt.Errorf("%s syncer, %d replicas, %d endpoints: %w", syncer, n, e, err)
				}
				fmt.Fprintf(os.Stderr, "syncbench: %-5s %2d replicas %5d endpoints: CPU %.2f%% of a core, %.0f B/s sent, %.1f B per endpoint per push, visible p50 %v p99 %v (%d)\n",
					syncer, n, e, 100*r.cpu, r.bytesPerS, r.perEPPush, r.visibleP50, r.visibleP99, r.samples)
				results = append(results, r)
			}
		}
	}
	table := report(o, results, time.Since(start))
	fmt.Println(table)
	if o.smoke {
		return smokeCheck(o, results)
	}
	if o.write != "" {
		return markdown.ReplaceStamped(o.write, beginMarker, endMarker, table, stamp)
	}
	return nil
}

// smokeCheck fails when peer-syncer did not share: no value became visible on
// another replica, or nothing was sent.
func smokeCheck(o runOptions, rs []result) error {
	var errs []error
	for _, r := range rs {
		if r.syncer != "peer" {
			continue
		}
		if r.samples == 0 {
			errs = append(errs, fmt.Errorf("%d replicas: no value of a replica became visible on another", r.replicas))
		}
		if r.perEPPush <= 0 {
			errs = append(errs, fmt.Errorf("%d replicas: nothing was sent", r.replicas))
		}
		if r.visibleP99 > 5*o.interval {
			errs = append(errs, fmt.Errorf("%d replicas: values took %v (p99) to become visible, more than 5 intervals", r.replicas, r.visibleP99))
		}
	}
	return errors.Join(errs...)
}

type benchProc struct {
	cmd  *exec.Cmd
	http string
	out  *bytes.Buffer
}

func measure(env *testenv.Env, o runOptions, syncer string, n, endpoints int) (result, error) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "syncbench", nil)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = env.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()
	kubeconfig := filepath.Join(os.TempDir(), "syncbench-"+ns+".kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		return result{}, err
	}
	defer os.Remove(kubeconfig)
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	var procs []*benchProc
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
			}
		}
	}()
	// The EndpointSlices list all n replicas, each with its peer-sync port; replica
	// 0 is a full replica process (the one measured), replicas 1..n-1 are the swarm.
	ports := make([]int, n)
	for i := range n {
		ip := netns.Addr(10 + i)
		ports[i] = testenv.FreePort(ip)
		s := slicegen.Slice(fmt.Sprintf("epp-r%d", i), slicegen.Namespace(ns), slicegen.Ports("peer-sync", ports[i]), slicegen.Pod(fmt.Sprintf("epp-%d", i), ip))
		s.Annotations = map[string]string{discoveryv1.LabelManagedBy: "syncbench"}
		if _, err := env.Clientset.DiscoveryV1().EndpointSlices(ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			return result{}, err
		}
	}
	measured := &benchProc{http: testenv.FreeAddr(), out: &bytes.Buffer{}}
	measured.cmd = exec.Command(self, "replica", "--syncer="+syncer, "--endpoints="+strconv.Itoa(endpoints), "--interval="+o.interval.String(),
		"--sync-address="+net.JoinHostPort(netns.Addr(10), strconv.Itoa(ports[0])), "--http-address="+measured.http, "--index=0",
		"--decisions="+strconv.Itoa(o.decisions), "--change="+strconv.FormatFloat(o.change, 'f', -1, 64))
	measured.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAME=epp-0", "POD_IP="+netns.Addr(10), "NAMESPACE="+ns, "GOMAXPROCS="+strconv.Itoa(o.procs))
	measured.cmd.Stdout, measured.cmd.Stderr = measured.out, measured.out
	if err := measured.cmd.Start(); err != nil {
		return result{}, err
	}
	procs = append(procs, measured)
	var swarmOut *bytes.Buffer
	if syncer == "peer" && n > 1 {
		var ps []string
		for _, p := range ports[1:] {
			ps = append(ps, strconv.Itoa(p))
		}
		sw := &benchProc{out: &bytes.Buffer{}}
		sw.cmd = exec.Command(self, "swarm", "--n="+strconv.Itoa(n-1), "--endpoints="+strconv.Itoa(endpoints), "--interval="+o.interval.String(),
			"--namespace="+ns, "--change="+strconv.FormatFloat(o.change, 'f', -1, 64), "--target=epp-0@"+net.JoinHostPort(netns.Addr(10), strconv.Itoa(ports[0])), "--ports="+strings.Join(ps, ","))
		sw.cmd.Stdout, sw.cmd.Stderr = sw.out, sw.out
		swarmOut = sw.out
		if err := sw.cmd.Start(); err != nil {
			return result{}, err
		}
		procs = append(procs, sw)
	}
	// Ready: discovery synced, and (peer-syncer) every peer in sync.
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := measured.status(false)
		if err == nil && st.Ready && st.Peers == n-1 && (syncer == "local" || st.InSync == n-1) {
			break
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("the measured replica not in sync after 90 s (status %+v, last error %q); output:\n%s", st, errText(err), tail(measured.out))
			if swarmOut != nil {
				msg += "\nthe swarm's output:\n" + tail(swarmOut)
			}
			return result{}, errors.New(msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(o.warmup)
	if _, err := measured.status(true); err != nil { // resets the latencies
		return result{}, fmt.Errorf("%w; the replica's output:\n%s", err, tail(measured.out))
	}
	cpu0, err := cputime.Of(measured.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	sent0, err := measured.sentBytes()
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	time.Sleep(o.window)
	wall := time.Since(t0)
	r := result{syncer: syncer, replicas: n, endpoints: endpoints}
	c, err := cputime.Of(measured.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	r.cpu = float64(c-cpu0) / float64(wall)
	s1, err := measured.sentBytes()
	if err != nil {
		return result{}, err
	}
	sent := s1 - sent0
	st, err := measured.status(true)
	if err != nil {
		return result{}, fmt.Errorf("%w; the replica's output:\n%s", err, tail(measured.out))
	}
	lat := st.Latencies
	r.bytesPerS = sent / wall.Seconds()
	if n > 1 {
		pushes := wall.Seconds() / o.interval.Seconds() * float64(n-1) // per replica
		r.perEPPush = sent / pushes / float64(endpoints)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.samples = len(lat)
		r.visibleP50 = time.Duration(lat[len(lat)/2]).Round(time.Millisecond)
		r.visibleP99 = time.Duration(lat[min(len(lat)-1, len(lat)*99/100)]).Round(time.Millisecond)
	}
	return r, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func tail(b *bytes.Buffer) string {
	s := b.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

var client = &http.Client{Timeout: 5 * time.Second}

func (p *benchProc) status(reset bool) (status, error) {
	var st status
	url := "http://" + p.http + "/status"
	if reset {
		url += "?reset=1"
	}
	resp, err := client.Get(url)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// sentBytes is the replica's epp_peer_sync_sent_bytes_total (0 for LocalSyncer).
func (p *benchProc) sentBytes() (float64, error) {
	resp, err := client.Get("http://" + p.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "epp_peer_sync_sent_bytes_total{") {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, sc.Err()
}

const (
	beginMarker = "<!-- sync-bench:begin (generated by `make bench-sync`, do not edit) -->"
	endMarker   = "<!-- sync-bench:end -->"
)

func report(o runOptions, rs []result, took time.Duration) string {
	var sb strings.Builder
	sb.WriteString(markdown.Measured("`make bench-sync`"))
	fmt.Fprintf(&sb, ": per case, the CPU time and the bytes sent of one replica process (the EPP's data layer: the discovery plugin on the API server, the syncer, the runtime's publishing loop), whose N−1 peers run as one swarm process (syncers that push to it and hear from it), over a window of %v after every peer was in sync; interval %v; %.0f%% of the endpoints' values changed every interval (100%%: the most a push carries); %d scheduling decisions a second per replica, each reading every endpoint's aggregate. The whole bench took %v.\n\n",
		o.window, o.interval, 100*o.change, o.decisions, took.Round(time.Second))
	sb.WriteString("| replicas | endpoints | CPU per replica, LocalSyncer | CPU per replica, peer-syncer | sharing costs (difference) | sent per replica | bytes per endpoint per push | visible on another replica, p50 / p99 |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	find := func(s string, n, e int) *result {
		for i := range rs {
			if rs[i].syncer == s && rs[i].replicas == n && rs[i].endpoints == e {
				return &rs[i]
			}
		}
		return nil
	}
	for _, n := range o.replicas {
		for _, e := range o.endpoints {
			l, p := find("local", n, e), find("peer", n, e)
			if l == nil || p == nil {
				continue
			}
			fmt.Fprintf(&sb, "| %d | %s | %.2f%% | %.2f%% | %+.2f%% of a core | %s/s | %.1f | %v / %v |\n",
				n, markdown.Thousands(e), 100*l.cpu, 100*p.cpu, 100*(p.cpu-l.cpu), bytesString(p.bytesPerS), p.perEPPush, p.visibleP50, p.visibleP99)
		}
	}
	return sb.String()
}

func bytesString(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
