package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peersync"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/markdown"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/cputime"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/peerdoc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/proc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/loadgen"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/workload"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/extproc"
)

type runOptions struct {
	// refresh, if set, is the EPPs' --refresh-metrics-interval (upstream's default
	// and least, 50ms, otherwise).
	refresh  time.Duration
	configs  []configuration
	replicas []int
	kinds    []workload.Kind
	sizes    []string
	seeds    []uint64
	// controlSeeds bounds the seeds of the control configurations, and
	// controlKinds their workloads.
	controlSeeds int
	controlKinds []workload.Kind
	servers      int
	sim          modelsimFlags
	scale        float64
	write        string
	quote        []string
	plot         string
	smoke        bool
	quick        bool
	// measuredBy is the command the report names as its source.
	measuredBy string
	epp        string
	timeout    time.Duration
	// restartConfigs also run through a rolling restart of restartReplicas
	// replicas, restartSeeds times (see rollingRestarts).
	restartConfigs  []string
	restartReplicas int
	restartSeeds    int
	// restartBaselines also run the restart's workload without a restart.
	restartBaselines []string
	// faultConfigs also run through faults (faultKinds) of one of faultReplicas
	// replicas, faultSeeds times each (see faults).
	faultConfigs  []string
	faultKinds    []string
	faultReplicas int
	faultSeeds    int
	// load is the section under load (load.go).
	load loadOptions
}

// seedsOf are the seeds configuration c runs.
func (o runOptions) seedsOf(c configuration) []uint64 {
	if c.control {
		return o.seeds[:min(len(o.seeds), o.controlSeeds)]
	}
	return o.seeds
}

// faulted says whether configuration c with n replicas also runs through faults.
func (o runOptions) faulted(c configuration, n int) bool {
	return !c.single && n == o.faultReplicas && slices.Contains(o.faultConfigs, c.name) && o.faultSeeds > 0 && len(o.faultKinds) > 0
}

// restarts says whether configuration c with n replicas also runs through a
// rolling restart.
func (o runOptions) restarts(c configuration, n int) bool {
	return !c.single && n == o.restartReplicas && slices.Contains(o.restartConfigs, c.name) && o.restartSeeds > 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseRunOptions(args []string) (runOptions, error) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var o runOptions
	o.sim.register(fs, benchCapacity, modelsim.CorePage) // DECISIONS: "The model servers' metrics page"
	configs := fs.String("configs", "single,single-shared,single-active,single-peer,local,shared-index-default,shared-index", "configurations, in order: single (one replica), single-shared (one replica with the shared index: a control), single-active (one replica with peer's profile: a control), single-peer (single-active with peer-syncer: a control), local (LocalSyncer), local-active (LocalSyncer with peer's profile: a control), peer (peer-syncer), shared-index-default (the shared prefix index on the default profile), shared-index-tick (shared-index-default with peer-syncer's readTick at 10ms; not in the default set), shared-index (peer and the shared prefix index)")
	restart := fs.String("restart", "local,peer,shared-index", "configurations (of --configs) that also run the multi-turn workload that fits through a rolling restart of their replicas (\"\": none)")
	fs.IntVar(&o.restartReplicas, "restart-replicas", 3, "replicas of the rolling restart runs (one of --replicas)")
	fs.IntVar(&o.restartSeeds, "restart-seeds", 3, "rolling restart runs per configuration (seeds 1, 2, ...; the fault targets want 3 at least)")
	baselines := fs.String("restart-baseline", "shared-index", "configurations (of --restart) that also run each rolling restart's workload without a restart, split at the same times (\"\": none)")
	faults := fs.String("faults", "shared-index", "configurations (of --configs, sharing the index) that also run the multi-turn workload that fits, at twice its rate and once the caches are full, through each fault of --fault-kinds (\"\": none)")
	faultKindsFlag := fs.String("fault-kinds", strings.Join(faultKinds, ","), "faults of the fault runs: freeze (SIGSTOP for 2 s, past the TTL), freeze-15s, reset (ss -K of its peer-sync connections), kill (SIGKILL, then started again, the gateway retrying on another replica), flap (not ready for 5 s, then ready), clock-skew (its clock 3 s ahead, the whole run)")
	fs.IntVar(&o.faultReplicas, "fault-replicas", 3, "replicas of the fault runs (one of --replicas)")
	fs.IntVar(&o.faultSeeds, "fault-seeds", 3, "runs per fault (seeds 1, 2, ...), each with its baseline")
	replicas := fs.String("replicas", "3,8", "replica counts of the active-active configurations")
	kinds := fs.String("workloads", "multi-turn,shared-prefix", "workloads: multi-turn, shared-prefix")
	sizes := fs.String("sizes", "fits,exceeds", "sizes: fits (the working set fits the fleet's KV caches), exceeds")
	seeds := fs.Int("seeds", 5, "seeds per workload (1, 2, ...) of one replica and the shared index (the headline rows)")
	fs.IntVar(&o.controlSeeds, "control-seeds", 3, "seeds per workload of the control configurations (single-shared, single-active, single-peer, local, local-active, peer), at most --seeds")
	controlKinds := fs.String("control-workloads", "multi-turn", "workloads of the control configurations (of --workloads)")
	fs.BoolVar(&o.quick, "quick", false, "a quick set for iteration: 2 seeds (1 for the controls), no rolling restart; the published section says so")
	fs.IntVar(&o.servers, "servers", 8, "simulated model servers")
	fs.Float64Var(&o.scale, "scale", 1, "multiplies every workload's number of sessions or requests")
	fs.StringVar(&o.write, "write", "", "write the tables into this markdown file, between the routing-bench markers")
	quote := fs.String("quote", "", "with --write, write the headline also into these markdown files (comma-separated), between the routing-headline markers")
	fs.StringVar(&o.plot, "plot", "", "write the plot (SVG) to this file")
	fs.BoolVar(&o.smoke, "smoke", false, "fail unless every request was routed and answered, the servers' token counts match the generator's, one replica's hit rate is above halfway from prefix-blind routing's to the ceiling, and (with the shared index) every placement reached every peer")
	loadFlags := registerLoadFlags(fs)
	fs.StringVar(&o.epp, "epp", "", "the EPP build (bin/epp-llmd)")
	fs.DurationVar(&o.timeout, "run-timeout", 2*time.Minute, "wall-clock bound of one run (one workload, size and seed)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	o.measuredBy = makeInvocation("bench-routing", "BENCH_ROUTING_FLAGS", fs, "epp", "write", "quote", "plot")
	if o.load, err = loadFlags(); err != nil {
		return o, err
	}
	if o.load.only {
		// The main matrix's flags are not used: --configs, --restart and
		// --faults keep their defaults, and only the section runs.
		o.measuredBy = makeInvocation("bench-routing-load", "BENCH_ROUTING_FLAGS", fs, "epp", "write", "load-only")
		*configs, *restart, *faults, *baselines = "", "", "", ""
	}
	if err := o.sim.validate(); err != nil {
		return o, err
	}
	for _, name := range splitList(*configs) {
		c, err := configurationNamed(name)
		if err != nil {
			return o, fmt.Errorf("--configs: %w", err)
		}
		o.configs = append(o.configs, c)
	}
	for _, name := range splitList(*restart) {
		c, err := configurationNamed(name)
		if err != nil {
			return o, fmt.Errorf("--restart: %w", err)
		}
		if c.single {
			return o, fmt.Errorf("--restart: %s has one replica, none to restart one at a time", name)
		}
		o.restartConfigs = append(o.restartConfigs, name)
	}
	o.quote = splitList(*quote)
	for _, name := range splitList(*faults) {
		c, err := configurationNamed(name)
		if err != nil {
			return o, fmt.Errorf("--faults: %w", err)
		}
		if !c.sharesIndex {
			return o, fmt.Errorf("--faults: %s does not share the index: the fault runs compare the replicas' indexes", name)
		}
		o.faultConfigs = append(o.faultConfigs, name)
	}
	o.faultKinds = splitList(*faultKindsFlag)
	if err := validFaults(o.faultKinds); err != nil {
		return o, fmt.Errorf("--fault-kinds: %w", err)
	}
	for _, name := range splitList(*baselines) {
		if _, err := configurationNamed(name); err != nil {
			return o, fmt.Errorf("--restart-baseline: %w", err)
		}
		o.restartBaselines = append(o.restartBaselines, name)
	}
	if o.replicas, err = replicaCounts(*replicas); err != nil {
		return o, err
	}
	for _, k := range splitList(*kinds) {
		if k != string(workload.MultiTurn) && k != string(workload.SharedPrefix) {
			return o, fmt.Errorf("--workloads: unknown workload %q: want %s or %s", k, workload.MultiTurn, workload.SharedPrefix)
		}
		o.kinds = append(o.kinds, workload.Kind(k))
	}
	for _, k := range splitList(*controlKinds) {
		if !slices.Contains(o.kinds, workload.Kind(k)) {
			return o, fmt.Errorf("--control-workloads: %q is not one of --workloads=%s", k, *kinds)
		}
		o.controlKinds = append(o.controlKinds, workload.Kind(k))
	}
	for _, s := range splitList(*sizes) {
		if s != sizeFits && s != sizeExceeds {
			return o, fmt.Errorf("--sizes: unknown size %q: want %s or %s", s, sizeFits, sizeExceeds)
		}
		o.sizes = append(o.sizes, s)
	}
	if o.quick {
		*seeds, o.controlSeeds, o.restartSeeds = 2, 1, 0
	}
	if *seeds < 1 || o.controlSeeds < 1 {
		return o, fmt.Errorf("--seeds=%d --control-seeds=%d: want at least 1 each", *seeds, o.controlSeeds)
	}
	for i := range *seeds {
		o.seeds = append(o.seeds, uint64(i+1))
	}
	switch {
	case o.servers < 2 || o.servers > 100:
		return o, fmt.Errorf("--servers=%d: want 2 to 100", o.servers)
	case o.scale <= 0:
		return o, fmt.Errorf("--scale=%v: want a positive factor", o.scale)
	case o.epp == "":
		return o, errors.New("--epp: the EPP build is required (make build-llmd builds bin/epp-llmd)")
	case (len(o.configs) == 0 && !o.load.only) || len(o.kinds) == 0 || len(o.sizes) == 0:
		return o, errors.New("--configs, --workloads and --sizes: want at least one each")
	case o.restartSeeds < 0:
		return o, fmt.Errorf("--restart-seeds=%d: want 0 or more", o.restartSeeds)
	case o.faultSeeds < 0:
		return o, fmt.Errorf("--fault-seeds=%d: want 0 or more", o.faultSeeds)
	case len(o.faultConfigs) > 0 && o.faultSeeds > 0 && !slices.Contains(o.replicas, o.faultReplicas):
		return o, fmt.Errorf("--fault-replicas=%d: want one of --replicas=%s, or --faults=\"\"", o.faultReplicas, *replicas)
	case len(o.restartConfigs) > 0 && o.restartSeeds > 0 && !slices.Contains(o.replicas, o.restartReplicas):
		return o, fmt.Errorf("--restart-replicas=%d: want one of --replicas=%s (the rolling restart runs on those replicas after their runs), or --restart=\"\"", o.restartReplicas, *replicas)
	}
	if _, err := os.Stat(o.epp); err != nil {
		return o, fmt.Errorf("--epp=%s: %w", o.epp, err)
	}
	return o, nil
}

func runMain(args []string) error {
	o, err := parseRunOptions(args)
	if err != nil {
		return err
	}
	// What the sections it writes measured: taken before the namespace, at the start.
	stamp, err := markdown.StampOf(o.epp)
	if err != nil {
		return err
	}
	// A network namespace of its own: the replicas and the model servers have
	// addresses an EndpointSlice and a pod accept, and nothing leaves the machine.
	netns.Isolate("routingbench")
	b, err := newBench(o)
	if err != nil {
		return err
	}
	defer b.close()
	start := time.Now()
	if err := b.runAll(); err != nil {
		return err
	}
	var rep rendered
	if !o.load.only {
		rep = b.report(time.Since(start))
		fmt.Println(rep.markdown)
	}
	load := b.loadReport(o.measuredBy, b.loadTook)
	fmt.Println(load)
	if o.smoke {
		return b.smokeCheck()
	}
	if o.write != "" && !o.load.only {
		if err := markdown.ReplaceStamped(o.write, beginMarker, endMarker, rep.markdown, stamp); err != nil {
			return err
		}
		if err := quoteHeadline(o.quote, b.headline()); err != nil {
			return err
		}
	}
	if o.write != "" && load != "" {
		if err := markdown.ReplaceStamped(o.write, loadBeginMarker, loadEndMarker, load, stamp); err != nil {
			return err
		}
	}
	if o.plot != "" && !o.load.only {
		if err := os.WriteFile(o.plot, []byte(rep.svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// bench is one run of the benchmark: an API server, the simulated fleet, and the
// results so far.
type bench struct {
	o       runOptions
	env     *testenv.Env
	fleet   *modelsim.Fleet
	servers map[string]int
	results []result
	// failures are what could not be measured, and why.
	failures []string
	// refs are the prefix-blind and ceiling figures of each workload, size and seed.
	refs map[refKey]reference
	// footprints are each configuration's replicas' memory and index at its end.
	footprints []footprint
	// restarts are the runs through a rolling restart.
	restarts []restartResult
	// faultResults are the runs through faults, each followed by its baseline.
	faultResults []faultResult
	// loadResults are the runs of the section under load, and loadTook its time.
	loadResults []result
	loadTook    time.Duration
	// scrapeCounts, if set, are the model servers' scrapes so far (the capacity
	// mode's servers; else the fleet's).
	scrapeCounts func() []int64
	logf         func(format string, args ...any)
}

type refKey struct {
	kind workload.Kind
	size string
	seed uint64
}

// reference is what routing alone can do on a workload, independent of timing.
type reference struct {
	// blind is the hit rate of requests sent to servers at random (the fleet's
	// caches, every request at once): what a router blind to prefixes gets.
	blind float64
	// ceiling is the hit rate of one cache without a bound: every token an earlier
	// request sent is a hit, all that any routing can reach.
	ceiling float64
}

func newBench(o runOptions) (*bench, error) {
	b := &bench{o: o, servers: map[string]int{}, refs: map[refKey]reference{},
		logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "routingbench: "+f+"\n", a...) }}
	var err error
	if b.env, err = testenv.Start(testenv.WithoutFsync()); err != nil {
		return nil, err
	}
	var ls []net.Listener
	for i := range o.servers {
		l, err := net.Listen("tcp", net.JoinHostPort(netns.Addr(100+i), strconv.Itoa(eppreplica.ModelServerPort)))
		if err != nil {
			b.env.Stop()
			return nil, fmt.Errorf("model server %d: %w", i, err)
		}
		ls = append(ls, l)
		b.servers[l.Addr().String()] = i
	}
	if b.fleet, err = modelsim.StartFleet(o.sim.cfg, modelsim.NewClock(o.sim.speedup), ls, 5*time.Millisecond); err != nil {
		b.env.Stop()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	_ = b.fleet.Stop()
	b.env.Stop()
}

// runAll runs every configuration, replica count, workload, size and seed.
func (b *bench) runAll() error {
	for _, c := range b.o.configs {
		counts := b.o.replicas
		if c.single {
			counts = []int{1}
		}
		for _, n := range counts {
			if err := b.runConfiguration(c, n); err != nil {
				// The others are still measured; the report says what failed.
				b.failures = append(b.failures, fmt.Sprintf("%s × %d: %v", c.title, n, err))
				b.logf("%s × %d: %v", c.title, n, err)
			}
		}
	}
	b.runUnderLoad()
	return nil
}

// eppProc is a running EPP replica.
type eppProc struct {
	*eppreplica.Replica
	// slice is the replica's index among the Service's slices (eppreplica's
	// WriteSyncSlice).
	slice   int
	process *proc.Process
	client  *extproc.Client
}

// runningFleet is configuration c's n replicas, started, listed as each other's
// peers and ready, in a namespace of their own.
type runningFleet struct {
	ns, home string
	procs    []*eppProc
	// idle is the replicas' CPU per second, in all, with no request.
	idle float64
}

// withFleet starts configuration c's n replicas on the model servers, runs body
// on them once they are ready, and stops them.
func (b *bench) withFleet(c configuration, n int, body func(f *runningFleet) error) error {
	ctx := context.Background()
	reps := make([]*eppreplica.Replica, n)
	for i := range reps {
		reps[i] = eppreplica.New(i)
	}
	ns, err := b.env.CreateNamespace(ctx, "routing-"+c.name, nil)
	if err != nil {
		return err
	}
	defer func() { _ = b.env.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()
	var ips []string
	for i := range b.o.servers {
		ips = append(ips, netns.Addr(100+i))
	}
	if _, err := eppreplica.ModelServerPods(ctx, b.env.Clientset, ns, ips); err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "routingbench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(home) }()
	scrapes := b.scrapes()
	procs, err := b.startReplicas(ns, home, reps, c)
	defer stopReplicas(procs)
	if err != nil {
		return err
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if err := eppreplica.WriteSyncSlices(ctx, b.env.Clientset, ns, reps, all, "routingbench"); err != nil {
		return err
	}
	t0 := time.Now()
	if err := b.waitReady(c, procs, len(procs), scrapes); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the start's work done (informers, first scrapes)
	idle, err := idleCPU(procs, 3*time.Second)
	if err != nil {
		return err
	}
	b.logf("%s × %d: ready after %v; idle, the replicas use %.1f%% of a core", c.title, n, time.Since(t0).Round(time.Millisecond), 100*idle)
	return body(&runningFleet{ns: ns, home: home, procs: procs, idle: idle})
}

// runConfiguration runs configuration c with n replicas through every workload,
// size and seed of the main matrix, then its faults and rolling restarts.
func (b *bench) runConfiguration(c configuration, n int) error {
	return b.withFleet(c, n, func(f *runningFleet) error {
		procs := f.procs
		for _, kind := range b.o.kinds {
			if c.control && !slices.Contains(b.o.controlKinds, kind) {
				continue
			}
			for _, size := range b.o.sizes {
				for _, seed := range b.o.seedsOf(c) {
					r, err := b.runCase(c, n, procs, kind, size, seed)
					if err != nil {
						b.failures = append(b.failures, fmt.Sprintf("%s × %d, %s %s, seed %d: %v", c.title, n, kind, size, seed, err))
						b.logf("%s × %d, %s %s, seed %d: %v", c.title, n, kind, size, seed, err)
						continue
					}
					r.idleCPU = f.idle
					b.logf("%s × %d, %s %s, seed %d: %s", c.title, n, kind, size, seed, r.summary())
					b.results = append(b.results, r)
				}
			}
		}
		fp, err := footprintOf(c, procs)
		if err != nil {
			return err
		}
		b.footprints = append(b.footprints, fp)
		b.logf("%s × %d: %s", c.title, n, fp.summary())
		if b.o.faulted(c, n) {
			if err := b.faults(c, f.ns, f.home, procs); err != nil {
				return err
			}
		}
		if b.o.restarts(c, n) {
			return b.rollingRestarts(c, f.ns, f.home, procs)
		}
		return nil
	})
}

func (b *bench) scrapes() []int64 {
	if b.scrapeCounts != nil {
		return b.scrapeCounts()
	}
	out := make([]int64, len(b.fleet.Servers))
	for i, s := range b.fleet.Servers {
		out[i] = s.Scrapes()
	}
	return out
}

// startReplicas starts the replicas reps in namespace ns with the configuration
// c gives each (on c's EPP build), their HOMEs in dir, and returns once they listen on their
// ports (eppreplica.Launch: a replica whose port was taken before it bound it is
// started again on other ports). The replicas that started are returned also with
// an error; stop them with stopReplicas.
func (b *bench) startReplicas(ns, dir string, reps []*eppreplica.Replica, c configuration) ([]*eppProc, error) {
	return b.startReplicasWith(ns, dir, reps, c, nil)
}

// startReplicasWith is startReplicas with env added to each replica's environment.
func (b *bench) startReplicasWith(ns, dir string, reps []*eppreplica.Replica, c configuration, env []string) ([]*eppProc, error) {
	// --tracing=false: upstream's chart passes it (its default, true, prints every
	// request's spans to stdout).
	args := []string{"--tracing=false"}
	if b.o.refresh > 0 {
		args = append(args, "--refresh-metrics-interval="+b.o.refresh.String())
	}
	bin := b.o.epp
	if c.epp != "" {
		bin = c.epp
	}
	l := eppreplica.Launch{Bin: bin, Kubeconfig: b.env.Kubeconfig, Dir: dir, Args: args, Env: env, Logf: b.logf}
	ps, err := l.Start(ns, reps, func(i int) string { return c.config(reps[i]) })
	var procs []*eppProc
	for i, p := range ps {
		if p != nil {
			procs = append(procs, &eppProc{Replica: reps[i], slice: i, process: p})
		}
	}
	if err != nil {
		return procs, err
	}
	for _, p := range procs {
		if p.client, err = extproc.Dial(p.GRPC); err != nil {
			return procs, err
		}
	}
	return procs, nil
}

// stopReplicas stops the replicas, all at once (SIGTERM; killed when one has not
// exited within proc.StopTimeout).
func stopReplicas(procs []*eppProc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { _ = p.process.Stop() })
	}
	wg.Wait()
	for _, p := range procs {
		if p.client != nil {
			_ = p.client.Close()
		}
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// waitReady waits until every replica of procs answers readiness SERVING, lists
// the n-1 others of its fleet as its peers (with peer-syncer: every peer in sync),
// and has read every model server's metrics a few times.
func (b *bench) waitReady(c configuration, procs []*eppProc, n int, scrapes0 []int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var wrong []string
		for _, p := range procs {
			select {
			case <-p.process.Exited():
				exit := p.process.ExitError()
				if exit == nil {
					exit = errors.New("exit code 0")
				}
				return fmt.Errorf("replica %s exited (%w); its output:\n%s", p.Pod, exit, tail(p.process.Output().String()))
			default:
			}
			if st, err := p.Ready(context.Background()); err != nil || st != healthpb.HealthCheckResponse_SERVING {
				wrong = append(wrong, fmt.Sprintf("%s: readiness %v %v", p.Pod, st, err))
				continue
			}
			doc, _, err := peerdoc.Get(p.Debug)
			if err != nil || doc.Synced == nil || !*doc.Synced || len(doc.Peers) != n-1 {
				wrong = append(wrong, fmt.Sprintf("%s: %d peers (want %d), %v", p.Pod, len(doc.Peers), n-1, err))
				continue
			}
			if c.syncs && n > 1 {
				if in, err := inSync(p.Debug); err != nil || in != n-1 {
					wrong = append(wrong, fmt.Sprintf("%s: %d peers in sync (want %d), %v", p.Pod, in, n-1, err))
				}
			}
			if c.sharesIndex {
				// Emulated peers hold no index and answer no exchange: the real
				// replica's index is there, and is never warm from them. A baseline
				// build may have no warm gauge (it came later): its peers in sync
				// are its readiness.
				if m, err := scrapeMetrics(p.Metrics); err != nil || (!m.hasWarm && c.epp == "") || (m.hasWarm && m.warm != 1 && !c.emulatedPeers) {
					wrong = append(wrong, fmt.Sprintf("%s: the shared index not warm (%v)", p.Pod, err))
				}
			}
		}
		want, per := 5*len(procs), "5 a replica"
		if c.sharesScraping {
			want, per = 5, "5 for the fleet" // one replica scrapes each server
		}
		for i, s := range b.scrapes() {
			if got := s - scrapes0[i]; got < int64(want) {
				wrong = append(wrong, fmt.Sprintf("server %d: %d scrapes, want %d (%s)", i, got, want, per))
			}
		}
		if len(wrong) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("not ready after 2 minutes: %s", strings.Join(wrong, "; "))
			for _, p := range procs {
				msg += fmt.Sprintf("\n%s's output:\n%s", p.Pod, tail(p.process.Output().String()))
			}
			return errors.New(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inSync is how many peers the replica's peer-syncer has in sync.
func inSync(debug string) (int, error) {
	resp, err := httpClient.Get("http://" + debug + "/debug/peer-sync?key=none")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var doc peersync.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range doc.Peers {
		if p.InSync {
			n++
		}
	}
	return n, nil
}

// tail is the start and the end of a process's output.
func tail(s string) string {
	if len(s) > 6000 {
		s = s[:2000] + "\n[...]\n" + s[len(s)-4000:]
	}
	return s
}

// salt makes a run's text its own: no prefix of it was ever sent before, to any
// replica or server of the bench.
func salt(parts ...any) uint64 {
	h := fnv.New64a()
	_, _ = fmt.Fprint(h, parts...)
	return h.Sum64()
}

// runCase runs one workload, size and seed through the replicas, from empty model
// server caches.
func (b *bench) runCase(c configuration, n int, procs []*eppProc, kind workload.Kind, size string, seed uint64) (result, error) {
	spec, err := b.spec(kind, size)
	if err != nil {
		return result{}, err
	}
	convs, err := workload.Generate(spec, seed, salt(c.name, n, kind, size, seed))
	if err != nil {
		return result{}, err
	}
	ref, err := b.reference(kind, size, seed, spec)
	if err != nil {
		return result{}, err
	}
	if err := b.waitIdle(); err != nil {
		return result{}, err
	}
	for _, s := range b.fleet.Servers {
		if err := s.Reset(); err != nil {
			return result{}, err
		}
	}
	_ = b.fleet.TakeBalance()
	st0 := b.fleet.Stats()
	cpu0, err := cpuOf(procs)
	if err != nil {
		return result{}, err
	}
	m0, err := scrapeAll(procs)
	if err != nil {
		return result{}, err
	}
	opts := loadgen.Options{Clock: b.fleet.Clock, Gateway: loadgen.NewGateway(gatewayReplicas(procs)...), Servers: b.servers, Model: b.o.sim.cfg.Model,
		Seed: seed, RunID: fmt.Sprintf("%s%d-%s-%s-%d", c.name, n, kind, size, seed), Timeout: 30 * time.Second,
		Start: b.fleet.Clock.Now()} // the clock runs across runs: this run's time 0 is now
	ctx, cancel := context.WithTimeout(context.Background(), b.o.timeout)
	defer cancel()
	start := time.Now()
	records := loadgen.Run(ctx, opts, convs)
	wall := time.Since(start)
	if err := b.waitIdle(); err != nil {
		return result{}, err
	}
	cpu1, err := cpuOf(procs)
	if err != nil {
		return result{}, err
	}
	st1 := b.fleet.Stats()
	r := summarize(records, convs, b.o.sim.cfg.BlockTokens)
	r.herding = herding(records, time.Duration(float64(refreshOrDefault(b.o.refresh))*b.o.sim.speedup))
	r.config, r.title, r.replicas, r.kind, r.size, r.seed = c.name, c.title, n, kind, size, seed
	r.wall = wall
	r.ref = ref
	balance := b.fleet.TakeBalance()
	r.imbalance, r.usage, r.waiting = balance.Imbalance(), balance.Usage(), balance.WaitingShare()
	r.server = diff(st1, st0)
	r.cpu = cpu1 - cpu0
	if r.sync, err = b.syncOver(c, procs, m0); err != nil {
		return result{}, err
	}
	r.check()
	if c.sharesIndex {
		r.checkSharing(n)
	}
	return r, nil
}

// gatewayReplicas are the replicas as the gateway lists them.
func gatewayReplicas(procs []*eppProc) []loadgen.Replica {
	out := make([]loadgen.Replica, len(procs))
	for i, p := range procs {
		out[i] = p.gatewayReplica()
	}
	return out
}

func (p *eppProc) gatewayReplica() loadgen.Replica {
	return loadgen.Replica{Name: p.Pod, Client: p.client}
}

// syncOver is what the replicas sent and merged since the readings m0 (every
// replica's together). With the shared index it waits (at most 5 s) until every
// placement published has reached every peer, merged (or dropped: checkSharing
// says so): they go out within the window, and a run is over once the servers
// are idle.
func (b *bench) syncOver(c configuration, procs []*eppProc, m0 []replicaMetrics) (replicaMetrics, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		m1, err := scrapeAll(procs)
		if err != nil {
			return replicaMetrics{}, err
		}
		var sum replicaMetrics
		for i := range m1 {
			sum = sum.add(m1[i].sub(m0[i]))
		}
		if !c.sharesIndex || sum.reached()+sum.dropped >= float64(len(procs)-1)*sum.placementBytes.count || time.Now().After(deadline) {
			return sum, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func diff(a, b modelsim.Stats) modelsim.Stats {
	return modelsim.Stats{Requests: a.Requests - b.Requests, Aborted: a.Aborted - b.Aborted, PromptTokens: a.PromptTokens - b.PromptTokens,
		CachedTokens: a.CachedTokens - b.CachedTokens, OutputTokens: a.OutputTokens - b.OutputTokens, Steps: a.Steps - b.Steps, Late: a.Late - b.Late}
}

// idleCPU is the replicas' CPU time per wall-clock second, in all, over window
// with no request (scraping the model servers' metrics, discovery, sync).
func idleCPU(procs []*eppProc, window time.Duration) (float64, error) {
	c0, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	return float64(c1-c0) / float64(time.Since(t0)), nil
}

func cpuOf(procs []*eppProc) (time.Duration, error) {
	var sum time.Duration
	for _, p := range procs {
		c, err := cputime.Of(p.process.Pid())
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// waitIdle waits (up to a minute) until no server runs or holds a request.
func (b *bench) waitIdle() error {
	for deadline := time.Now().Add(time.Minute); !b.fleet.Idle(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the model servers still have requests a minute after the run")
		}
	}
	return nil
}

// floor is the hit rate one replica must beat on a workload that fits: halfway
// from prefix-blind routing to the ceiling.
func (r reference) floor() float64 { return r.blind + (r.ceiling-r.blind)/2 }

// reference computes (once per workload, size and seed) what prefix-blind routing
// and a single unbounded cache hit on the workload.
func (b *bench) reference(kind workload.Kind, size string, seed uint64, spec workload.Spec) (reference, error) {
	key := refKey{kind, size, seed}
	if r, ok := b.refs[key]; ok {
		return r, nil
	}
	convs, err := workload.Generate(spec, seed, 0)
	if err != nil {
		return reference{}, err
	}
	m := b.o.servers
	blind := workload.ReplayCaches(convs, m, b.o.sim.cfg.CapacityBlocks, b.o.sim.cfg.BlockTokens, func(conv, turn int) int {
		return int(salt("blind", seed, conv, turn) % uint64(m))
	})
	ceiling := workload.ReplayCaches(convs, 1, 1<<40, b.o.sim.cfg.BlockTokens, func(int, int) int { return 0 })
	r := reference{blind: blind.HitRate(), ceiling: ceiling.HitRate()}
	b.refs[key] = r
	return r, nil
}

// replicaCounts reads --replicas: counts from 2 to 50, comma-separated.
func replicaCounts(flag string) ([]int, error) {
	var out []int
	for _, f := range splitList(flag) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 || n > 50 {
			return nil, fmt.Errorf("--replicas=%q: want counts from 2 to 50, comma-separated", flag)
		}
		out = append(out, n)
	}
	return out, nil
}
