package app

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerset"
)

// Defaults of the flags.
const (
	DefaultPeerPortName = endpointslice.DefaultPortName
	DefaultPeerPort     = endpointslice.DefaultPort
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
	PeerMembership      peers.Membership
	SnapshotFile        string
	PoolNamespace       string
	Kubeconfig          string
	MetricsAddr         string
	ProbeAddr           string

	// PeerSource names the peer source to run in the app's Sources: Parse sets it
	// to "endpointslice" (--epp-peer-service) or "file" (--epp-peer-file); it is ""
	// with peer discovery off.
	PeerSource string

	// Self is the replica's own identity, from POD_NAME (else the host name),
	// POD_IP and POD_IPS, in the pool namespace.
	Self peers.Self

	// EndpointSlice is the validated configuration of the EndpointSlice source.
	EndpointSlice peerset.Config

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

// Parse reads flags from args and the downward-API environment through getenv
// (NAMESPACE, POD_NAMESPACE, POD_NAME, POD_IP, POD_IPS, and HOSTNAME for the host
// name, which is the Pod's name in Kubernetes). It validates everything before any
// network call. Warnings (flags that have no effect) are written to stderr; usage
// goes to stderr on a parse error or -h.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	var membership string
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.BoolVar(&o.EnablePeerDiscovery, "enable-peer-discovery", false, "Turn peer discovery on. Off: no watch, no extra RBAC needed.")
	fs.StringVar(&o.PeerService, "epp-peer-service", "", "Name of the EPP's own Service; its EndpointSlices are the peer source.")
	fs.StringVar(&o.PeerFile, "epp-peer-file", "", "Path of a peers file (YAML or JSON); the file is the peer source, no Kubernetes needed.")
	fs.StringVar(&o.PeerPortName, "epp-peer-port-name", DefaultPeerPortName, "Service port name whose port is each peer's port.")
	fs.IntVar(&o.PeerPort, "epp-peer-port", DefaultPeerPort, "Port used when a slice has no port of that name.")
	fs.StringVar(&membership, "epp-peer-membership", string(peers.MembershipReady), `Which endpoints are peers: "ready" (ready, not terminating) or "alive" (also not ready, e.g. leader-election standbys).`)
	fs.StringVar(&o.SnapshotFile, "epp-peer-snapshot-file", "", "After every change, atomically write the /debug/peers document here.")
	fs.StringVar(&o.PoolNamespace, "pool-namespace", endpointslice.NamespaceFromEnv(getenv), "Namespace of the Service and its slices (default: env NAMESPACE, else POD_NAMESPACE).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, then in-cluster, then ~/.kube/config).")
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
	return o, o.complete(membership, getenv, stderr)
}

// complete validates the options and fills in Self and the source's configuration.
func (o *Options) complete(membership string, getenv func(string) string, stderr io.Writer) error {
	names := endpointslice.FlagNames
	if err := endpointslice.ValidatePort(names, o.PeerPort); err != nil {
		return usageError(err)
	}
	if err := endpointslice.ValidatePortName(names, o.PeerPortName); err != nil {
		return usageError(err)
	}
	m, err := endpointslice.ValidateMembership(names, membership)
	if err != nil {
		return usageError(err)
	}
	o.PeerMembership = m
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
	selfNS := o.PoolNamespace
	if o.PeerFile != "" && selfNS == "" {
		selfNS = "default"
	}
	hostname := func() (string, error) { return getenv("HOSTNAME"), nil }
	if o.Self, err = peers.SelfFromEnv(selfNS, getenv, hostname); err != nil {
		return usageError(err)
	}
	if o.PeerFile != "" {
		o.PeerSource = peers.SourceFile
		return nil
	}
	o.PeerSource = peers.SourceEndpointSlice
	o.EndpointSlice, err = endpointslice.Settings{
		Service:    o.PeerService,
		Namespace:  o.PoolNamespace,
		PortName:   o.PeerPortName,
		Port:       o.PeerPort,
		Membership: string(o.PeerMembership),
	}.Config(names, o.Self)
	if err != nil {
		return usageError(err)
	}
	return nil
}

// Source is the configured peer source: "endpointslice", "file", or "" when off.
func (o *Options) Source() string { return o.PeerSource }
