package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Defaults of the flags.
const (
	DefaultPeerPortName = discovery.DefaultPortName
	DefaultPeerPort     = discovery.DefaultPort
	DefaultMetricsAddr  = ":9090"
	DefaultProbeAddr    = ":8081"
)

// Options are the binary's settings after flag and environment parsing.
type Options struct {
	EnablePeerDiscovery bool
	SnapshotFile        string
	// PoolNamespace is the namespace of the peers (--pool-namespace, else env
	// NAMESPACE, else POD_NAMESPACE).
	PoolNamespace string
	Kubeconfig    string
	MetricsAddr   string
	ProbeAddr     string
	// ProbeInterval turns reachability probing on (> 0): every peer's peer-sync port
	// is connected to about this often (--epp-peer-probe-interval, default from
	// EPP_PEER_PROBE_INTERVAL: discovery.ProbeIntervalSetting).
	ProbeInterval time.Duration
	// PeerSyncAddr, when set, is listened on with a one-line identity reply, so that
	// the probes of other replicas find this one reachable (--peer-sync-bind-address,
	// default from EPP_PEER_SYNC_ADDRESS: discovery.PeerSyncAddressSetting).
	PeerSyncAddr string

	// PeerSource names the peer source to run (a SourceSpec.Name): the one whose
	// flag was set (--epp-peer-service: "endpointslice", --epp-peer-file: "file");
	// "" with peer discovery off.
	PeerSource string
	// Source is that source with its settings read and checked (nil with peer
	// discovery off).
	Source *discovery.Configured

	// Self is the replica's own identity, from POD_NAME (else the host name),
	// POD_IP and POD_IPS, in the pool namespace.
	Self peers.Self

	// Zap configures logging (the --zap-* flags).
	Zap zap.Options
}

// UsageError is a problem with the flags or the environment; the binary prints it on
// one line and exits with code 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error { return &UsageError{msg: fmt.Sprintf(format, a...)} }

func usageError(err error) error { return &UsageError{msg: err.Error()} }

// ErrHelp is returned when -h or --help was asked for; usage was printed.
var ErrHelp = flag.ErrHelp

// Parse is ParseSources with DefaultSources.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	return ParseSources(args, getenv, stderr, DefaultSources())
}

// ParseSources reads flags from args, the flags of every source of sources
// included, and the environment through getenv: the variables the sources'
// settings fall back to, and the downward API (POD_NAME, POD_IP, POD_IPS, and
// HOSTNAME for the host name, which is the Pod's name in Kubernetes). It validates
// everything before any network call. Warnings (flags that have no effect) are
// written to stderr; usage goes to stderr on -h.
func ParseSources(args []string, getenv func(string) string, stderr io.Writer, sources Sources) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.BoolVar(&o.EnablePeerDiscovery, "enable-peer-discovery", false, "Turn peer discovery on. Off: no watch, no extra RBAC needed.")
	sourceFlags := discovery.AddFlags(fs, getenv, sources)
	fs.StringVar(&o.SnapshotFile, "epp-peer-snapshot-file", "", "After every change, atomically write the /debug/peers document here.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, then in-cluster, then ~/.kube/config).")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", DefaultMetricsAddr, "Address serving /metrics and /debug/peers (plain HTTP).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", DefaultProbeAddr, "Address serving /healthz and /readyz.")
	o.Zap.BindFlags(fs)
	// Stack traces only for panics: an error log line is one line, unless
	// --zap-stacktrace-level asks for more (or --zap-devel, with its own default).
	panicLevel := zapcore.PanicLevel
	o.Zap.StacktraceLevel = &panicLevel
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintf(stderr, "Usage: epp [flags]\n       epp check-peers --service=<name> --namespace=<ns> [--port-name=http-metrics] [--membership=ready|alive] [--timeout=60s]\n\nEPP peer discovery: finds the other replicas of this EPP and serves them at /debug/peers.\n\n")
			fs.PrintDefaults()
			return o, ErrHelp
		}
		return o, usageErrorf("%v (run epp -h for the flags)", err)
	}
	if fs.NArg() > 0 {
		return o, usageErrorf("unexpected argument %q: epp takes flags only", fs.Arg(0))
	}
	if o.Zap.Development && !flagSet(fs, "zap-stacktrace-level") {
		o.Zap.StacktraceLevel = nil // development mode's default (warnings)
	}
	return o, o.complete(sourceFlags, getenv, stderr)
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// complete validates the options and configures the source whose flag was set.
func (o *Options) complete(sources *discovery.Flags, getenv func(string) string, stderr io.Writer) error {
	if err := sources.Check(); err != nil {
		return usageError(err)
	}
	ns, err := sources.Namespace()
	if err != nil {
		return usageError(err)
	}
	o.PoolNamespace = ns
	extras, err := sources.Extras()
	if err != nil {
		return usageError(err)
	}
	o.ProbeInterval, o.PeerSyncAddr = extras.ProbeInterval, extras.PeerSyncAddress
	selected, values := sources.Selected()
	if !o.EnablePeerDiscovery {
		for i, s := range selected {
			fmt.Fprintf(stderr, "epp: warning: --%s=%s has no effect without --enable-peer-discovery\n", s.Select.Flag, values[i])
		}
		if o.ProbeInterval > 0 {
			fmt.Fprintf(stderr, "epp: warning: --epp-peer-probe-interval=%v has no effect without --enable-peer-discovery\n", o.ProbeInterval)
		}
		return nil
	}
	switch len(selected) {
	case 0:
		var alts []string
		for _, s := range sources.Specs() {
			alts = append(alts, "--"+s.Select.Flag+"="+s.Placeholder)
		}
		return usageErrorf("--enable-peer-discovery needs a peer source: set %s", strings.Join(alts, " or "))
	case 1:
	default:
		var flags []string
		for _, s := range selected {
			flags = append(flags, "--"+s.Select.Flag)
		}
		return usageErrorf("%s are mutually exclusive: set only one peer source", strings.Join(flags, " and "))
	}
	spec := selected[0]
	hostname := func() (string, error) { return getenv("HOSTNAME"), nil }
	c, err := sources.Configure(spec, hostname)
	if err != nil {
		return usageError(err)
	}
	o.PeerSource, o.Source, o.Self = spec.Name, c, c.Self
	for _, f := range sources.Unused(spec) {
		fmt.Fprintf(stderr, "epp: warning: %s has no effect with --%s\n", f, spec.Select.Flag)
	}
	return nil
}
