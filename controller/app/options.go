package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Defaults of the flags.
const (
	DefaultPeerPortName = "peer-sync"
	DefaultPeerPort     = 9005
	DefaultMetricsAddr  = ":9090"
	DefaultProbeAddr    = ":8081"
)

// Options are the binary's settings after flag and environment parsing.
type Options struct {
	EnablePeerDiscovery bool
	PeerService         string
	PeerFile            string
	PeerPortName        string
	PeerPort            int
	SnapshotFile        string
	PoolNamespace       string
	Kubeconfig          string
	MetricsAddr         string
	ProbeAddr           string

	// Self is the replica's own identity, from POD_NAME, POD_IP and POD_IPS.
	Self peerset.Self

	// Zap configures logging (the --zap-* flags).
	Zap zap.Options
}

// UsageError is a problem with the flags or the environment; the binary prints it on
// one line and exits with code 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error { return &UsageError{msg: fmt.Sprintf(format, a...)} }

// ErrHelp is returned when -h or --help was asked for; usage was printed.
var ErrHelp = flag.ErrHelp

// Parse reads flags from args and the downward-API environment through getenv. It
// validates everything before any network call. Warnings (flags that have no effect)
// are written to stderr; usage goes to stderr on a parse error or -h.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	defaultNS := getenv("NAMESPACE")
	if defaultNS == "" {
		defaultNS = getenv("POD_NAMESPACE")
	}
	fs.BoolVar(&o.EnablePeerDiscovery, "enable-peer-discovery", false, "Turn peer discovery on. Off: no watch, no extra RBAC needed.")
	fs.StringVar(&o.PeerService, "epp-peer-service", "", "Name of the EPP's own Service; its EndpointSlices are the peer source.")
	fs.StringVar(&o.PeerFile, "epp-peer-file", "", "Path of a peers file (YAML or JSON); the file is the peer source, no Kubernetes needed.")
	fs.StringVar(&o.PeerPortName, "epp-peer-port-name", DefaultPeerPortName, "Service port name whose port is each peer's port.")
	fs.IntVar(&o.PeerPort, "epp-peer-port", DefaultPeerPort, "Port used when a slice has no port of that name.")
	fs.StringVar(&o.SnapshotFile, "epp-peer-snapshot-file", "", "After every change, atomically write the /debug/peers document here.")
	fs.StringVar(&o.PoolNamespace, "pool-namespace", defaultNS, "Namespace of the Service and its slices (default: env NAMESPACE, else POD_NAMESPACE).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", DefaultMetricsAddr, "Address serving /metrics and /debug/peers (plain HTTP).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", DefaultProbeAddr, "Address serving /healthz and /readyz.")
	o.Zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintf(stderr, "Usage: epp [flags]\n\nEPP peer discovery: finds the other replicas of this EPP and serves them at /debug/peers.\n\n")
			fs.PrintDefaults()
			return o, ErrHelp
		}
		return o, usageErrorf("%v (run epp -h for the flags)", err)
	}
	if fs.NArg() > 0 {
		return o, usageErrorf("unexpected argument %q: epp takes flags only", fs.Arg(0))
	}
	return o, o.complete(getenv, stderr)
}

// complete validates the options and fills in Self from the environment.
func (o *Options) complete(getenv func(string) string, stderr io.Writer) error {
	if o.PeerPort < 1 || o.PeerPort > 65535 {
		return usageErrorf("invalid --epp-peer-port=%d: must be between 1 and 65535", o.PeerPort)
	}
	if o.PeerPortName == "" {
		return usageErrorf("--epp-peer-port-name must not be empty: name the Service port of the peers (default %q)", DefaultPeerPortName)
	}
	if errs := validation.IsValidPortName(o.PeerPortName); len(errs) > 0 {
		return usageErrorf("invalid --epp-peer-port-name=%q: %s", o.PeerPortName, strings.Join(errs, "; "))
	}
	if !o.EnablePeerDiscovery {
		for _, f := range []struct{ name, value string }{{"epp-peer-service", o.PeerService}, {"epp-peer-file", o.PeerFile}} {
			if f.value != "" {
				fmt.Fprintf(stderr, "epp: warning: --%s=%s has no effect without --enable-peer-discovery\n", f.name, f.value)
			}
		}
		return nil
	}
	switch {
	case o.PeerService == "" && o.PeerFile == "":
		return usageErrorf("--enable-peer-discovery needs a peer source: set --epp-peer-service=<the EPP Service> or --epp-peer-file=<path>")
	case o.PeerService != "" && o.PeerFile != "":
		return usageErrorf("--epp-peer-service and --epp-peer-file are mutually exclusive: set only one peer source")
	}
	if o.PeerService != "" {
		if errs := validation.IsDNS1035Label(o.PeerService); len(errs) > 0 {
			return usageErrorf("invalid --epp-peer-service=%q: %s", o.PeerService, strings.Join(errs, "; "))
		}
		if o.PoolNamespace == "" {
			return usageErrorf("--epp-peer-service needs a namespace: set --pool-namespace or the NAMESPACE env (downward API fieldRef metadata.namespace)")
		}
		if errs := validation.IsDNS1123Label(o.PoolNamespace); len(errs) > 0 {
			return usageErrorf("invalid --pool-namespace=%q: %s", o.PoolNamespace, strings.Join(errs, "; "))
		}
	}
	self, err := selfFromEnv(getenv)
	if err != nil {
		return err
	}
	o.Self = self
	if o.PeerService != "" && self.Name == "" && len(self.Addresses) == 0 {
		return usageErrorf("--epp-peer-service: this replica must know itself to leave itself out of its peers: set POD_IP (fieldRef status.podIP), POD_IPS (status.podIPs) or POD_NAME (metadata.name) from the downward API")
	}
	return nil
}

// selfFromEnv reads POD_NAME, POD_IP and POD_IPS. POD_IP comes first in Addresses so
// that its family is the preferred one.
func selfFromEnv(getenv func(string) string) (peerset.Self, error) {
	self := peerset.Self{Name: strings.TrimSpace(getenv("POD_NAME"))}
	add := func(env, v string) error {
		v = strings.TrimSpace(v)
		if v == "" {
			return nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return usageErrorf("invalid %s=%q: not an IP address (set it from the downward API: fieldRef status.podIP / status.podIPs)", env, v)
		}
		a = a.Unmap()
		for _, have := range self.Addresses {
			if have == a {
				return nil
			}
		}
		self.Addresses = append(self.Addresses, a)
		return nil
	}
	if err := add("POD_IP", getenv("POD_IP")); err != nil {
		return self, err
	}
	for _, v := range strings.Split(getenv("POD_IPS"), ",") {
		if err := add("POD_IPS", v); err != nil {
			return self, err
		}
	}
	return self, nil
}

// Source is the configured peer source: "endpointslice", "file", or "" when off.
func (o *Options) Source() string {
	switch {
	case !o.EnablePeerDiscovery:
		return ""
	case o.PeerFile != "":
		return "file"
	default:
		return "endpointslice"
	}
}
