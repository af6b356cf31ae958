package discovery

import (
	"context"
	"flag"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Source finds peers and publishes every complete peer set (or, incrementally, every
// change) through the Publisher it was built with, and reports what stops it from
// reading them with Publisher.Fail. The Publisher leaves the replica itself out.
type Source interface {
	// Run runs the source until ctx ends, then returns nil; an error means the
	// source cannot go on.
	Run(ctx context.Context) error
}

// Status is what a source reports besides its peers.
type Status interface {
	// Synced reports whether the first complete peer set was published.
	Synced() bool
	// SyncedAt is when that happened (zero before).
	SyncedAt() time.Time
	// LastError is the last error the source met, nil after a complete read.
	LastError() error
}

// Settings are what every source of a program is given: the value of the flag that
// selected it and the settings all sources share.
type Settings struct {
	// Arg is the value of the source's flag (SourceSpec.Flag): the Service, the
	// file, the DNS name.
	Arg string
	// Namespace is the pool namespace (--pool-namespace); "" when unknown.
	Namespace string
	// PortName and Port are the peers' port: the port of that name where the source
	// knows ports by name, else Port.
	PortName string
	Port     int
	// Membership says which endpoints are peers.
	Membership peers.Membership
	// Self is this replica.
	Self peers.Self
}

// SourceSpec is one peer source of a program configured by flags (the epp binary):
// the flag that selects it, the flags and failure reasons of its own, and how to
// validate and build it. A new source is a package that implements Source and
// offers its SourceSpec, plus one line in the program's list of specs.
type SourceSpec struct {
	// Name is the source's name: the /debug/peers "source", the metrics' discovery
	// label in the binary.
	Name string
	// Flag (without the dashes) selects the source; its value is Settings.Arg.
	Flag string
	// Placeholder names the flag's value in messages: --<Flag>=<Placeholder>.
	Placeholder string
	// Usage is the flag's help.
	Usage string
	// Reasons are the failure reasons the source gives Publisher.Fail (for the
	// metrics: each is counted from 0).
	Reasons []string
	// Flags, if set, registers the source's own flags besides Flag; Complete and
	// New read the values it bound.
	Flags func(fs *flag.FlagSet)
	// Complete, if set, validates the settings before any network call and may fill
	// them in (Self's namespace, say); its error is printed as one line that names
	// the flag at fault (exit code 2).
	Complete func(s *Settings) error
	// New builds the source.
	New func(Deps) (Source, error)
}

// Deps is what SourceSpec.New gets to build its source.
type Deps struct {
	Settings
	// Publisher is where the source publishes and reports failures.
	Publisher *Publisher
	// RESTConfig loads the Kubernetes client configuration, for sources that need
	// one (it is never loaded for the others).
	RESTConfig func() (*rest.Config, error)
	// Log is the source's logger.
	Log logr.Logger
}
