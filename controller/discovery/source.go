package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubeconfig"
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

// SourceSpec is one peer source, declared once for the epp binary and for the EPP
// plugins: its name, the setting whose flag selects it in the binary, its failure
// reasons, the permissions it needs, and its settings, which it binds on a Binder
// and then checks together and builds from. The binary gets a flag of every
// setting that has one (Flags), and a plugin type (PluginType) takes the
// settings as its parameters (ConfigureParams); both read the same variables and
// name a setting in errors the way the user set it. A new source is a package that
// implements Source and offers its SourceSpec, plus one line in the list of
// sources (package sources).
type SourceSpec struct {
	// Name is the source's name: the /debug/peers "source", the metrics'
	// discovery label in the binary, and its plugin type's prefix.
	Name string
	// Select is the setting whose flag selects the source in the binary (Settings
	// binds it like the others); in a plugin it is a parameter like the others.
	Select Setting
	// Placeholder names Select's value in messages: --<flag>=<Placeholder>.
	Placeholder string
	// Reasons are the failure reasons the source gives Publisher.Fail (for the
	// metrics: each is counted from 0).
	Reasons []string
	// Permissions are the RBAC rules the source needs on the Kubernetes API in its
	// namespace; none for a source that never talks to Kubernetes (its client
	// configuration is then never loaded).
	Permissions []rbacv1.PolicyRule
	// Settings binds the source's settings on b (each to a variable of its own: it
	// is called once per configured source) and returns what checks them together
	// and builds the source from their values.
	Settings func(b *Binder) Bound
}

// PluginType is the source's type of EPP plugin: "<Name>-peer-discovery".
func (s SourceSpec) PluginType() string { return s.Name + "-peer-discovery" }

// Bound is a source's settings once bound: what checks them together and builds
// the source.
type Bound struct {
	// Complete, if set, checks the settings together, once each was read and
	// checked alone, before any network call; it may complete self (this replica,
	// in the namespace of NamespaceSetting, else "default"). Its errors name the
	// settings with Binder.Name.
	Complete func(self *peers.Self) error
	// New builds the source.
	New func(Deps) (Source, error)
}

// Deps is what Bound.New gets to build its source.
type Deps struct {
	// Namespace is the value of NamespaceSetting ("" when unset).
	Namespace string
	// Self is this replica (after Bound.Complete).
	Self peers.Self
	// Publisher is where the source publishes and reports failures.
	Publisher *Publisher
	// RESTConfig loads the Kubernetes client configuration, for sources that need
	// one; a source calls it when it starts (Run), so that building needs no API.
	RESTConfig func() (*rest.Config, error)
	// Log is the source's logger.
	Log logr.Logger
}

// Configured is a source whose settings were read and checked: ready to build.
type Configured struct {
	Spec SourceSpec
	// Namespace is the value of NamespaceSetting ("" when unset).
	Namespace string
	// Self is this replica, in Namespace (else "default").
	Self peers.Self
	// Bindings are the source's settings.
	Bindings []Binding
	bound    Bound
}

// ConfigureParams reads spec's settings from a plugin's JSON parameters (nil for
// none), each falling back to its variables (read with getenv) and its default,
// checks them, and reads this replica from the downward-API variables (POD_NAME,
// else hostname; POD_IP, POD_IPS). A parameter that is no setting of the source
// is an error, as are parameters that are not a JSON object. Errors are one line
// naming the parameter, or the variable it came from.
func ConfigureParams(spec SourceSpec, params map[string]json.RawMessage, getenv func(string) string, hostname func() (string, error)) (*Configured, error) {
	b := NewBinder(params, getenv)
	bound := bindAll(spec, b)
	var unknown []string
	for k := range params {
		if !b.consumed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		known := make([]string, 0, len(b.bound))
		for _, x := range b.bound {
			known = append(known, x.Param)
		}
		return nil, &UnknownParamError{Param: unknown[0], Known: known}
	}
	return complete(spec, b, bound, hostname)
}

// Declared are the settings of spec as it declares them (NamespaceSetting first),
// with their kinds and defaults: for help, documentation and tests.
func Declared(spec SourceSpec) []Binding {
	b := newBinder(nil, nil)
	bindAll(spec, b)
	return b.Bindings()
}

// UnknownParamError is a parameter that is no setting of the source.
type UnknownParamError struct {
	Param string
	// Known are the source's parameters; a program that takes more may add its own.
	Known []string
}

func (e *UnknownParamError) Error() string {
	return fmt.Sprintf("unknown field %q: the parameters are %s", e.Param, strings.Join(e.Known, ", "))
}

// bindAll binds NamespaceSetting and then the source's settings.
func bindAll(spec SourceSpec, b *Binder) Bound {
	var ns string
	b.String(&ns, NamespaceSetting, CheckNamespace)
	return spec.Settings(b)
}

func complete(spec SourceSpec, b *Binder, bound Bound, hostname func() (string, error)) (*Configured, error) {
	if err := b.Err(); err != nil {
		return nil, err
	}
	ns := b.Namespace()
	selfNS := ns
	if selfNS == "" {
		selfNS = "default" // what a peers file's entries without a namespace get
	}
	self, err := peers.SelfFromEnv(selfNS, b.getenv, hostname)
	if err != nil {
		return nil, err
	}
	if bound.Complete != nil {
		if err := bound.Complete(&self); err != nil {
			return nil, err
		}
	}
	if bound.New == nil {
		return nil, fmt.Errorf("peer source %s: its settings build nothing", spec.Name)
	}
	return &Configured{Spec: spec, Namespace: ns, Self: self, Bindings: b.Bindings(), bound: bound}, nil
}

// New builds the source, publishing through pub. restConfig loads the client
// configuration of a source that needs one; nil is kubeconfig.Load("").
func (c *Configured) New(pub *Publisher, restConfig func() (*rest.Config, error), log logr.Logger) (Source, error) {
	if restConfig == nil {
		restConfig = func() (*rest.Config, error) { return kubeconfig.Load("") }
	}
	return c.bound.New(Deps{Namespace: c.Namespace, Self: c.Self, Publisher: pub, RESTConfig: restConfig, Log: log})
}

// Value is the value of the setting whose parameter is param, as text ("" when the
// source has none).
func (c *Configured) Value(param string) string {
	for _, b := range c.Bindings {
		if b.Param == param {
			return b.Value
		}
	}
	return ""
}

// Summary lists the source's settings as param=value, for a log line.
func (c *Configured) Summary() []string {
	out := make([]string, 0, len(c.Bindings))
	for _, b := range c.Bindings {
		if b.Value != "" {
			out = append(out, b.Param+"="+b.Value)
		}
	}
	return out
}

// PeerDiscovery builds the source inside a PeerDiscovery (see NewPeerDiscovery)
// whose metrics are labelled instance.
func (c *Configured) PeerDiscovery(instance string, log logr.Logger, restConfig func() (*rest.Config, error)) (*PeerDiscovery, error) {
	return NewPeerDiscovery(c.Spec.Name, log, PublisherOptions{Instance: instance, Self: c.Self, Reasons: c.Spec.Reasons},
		func(pub *Publisher) (Source, error) { return c.New(pub, restConfig, log) })
}
