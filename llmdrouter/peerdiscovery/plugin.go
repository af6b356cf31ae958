package peerdiscovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/debugpeers"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/wiring"
)

// Plugin types.
const (
	EndpointSliceType = "endpointslice-peer-discovery"
	DNSType           = "dns-peer-discovery"
)

var (
	_ fwkdl.PeerDiscovery   = (*Plugin)(nil)
	_ fwkplugin.StateDumper = (*Plugin)(nil)
	_ fwkplugin.FactoryFunc = EndpointSliceFactory
	_ fwkplugin.FactoryFunc = DNSFactory
)

// Register registers the plugin types in the EPP's plugin registry, with stability
// Beta, and has package wiring track them (so that it can start the one
// dataLayer.peerDiscovery.pluginRef names).
func Register() {
	fwkplugin.Register(EndpointSliceType, fwkplugin.StabilityBeta, wiring.Tracked(EndpointSliceType, EndpointSliceFactory))
	fwkplugin.Register(DNSType, fwkplugin.StabilityBeta, wiring.Tracked(DNSType, DNSFactory))
}

// Plugin is peer discovery as an EPP plugin: a discovery.PeerDiscovery (one source
// with its own store), its /debug/peers view, and an optional address to serve it on.
type Plugin struct {
	typedName fwkplugin.TypedName
	discovery *discovery.PeerDiscovery
	view      *debugpeers.View
	debugAddr string
	log       logr.Logger
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.typedName }

// Start implements fwkdl.PeerDiscovery: it runs the source and sends n the initial
// peer set, then every change, from the calling goroutine, until ctx ends (nil) or
// the source cannot go on (its error). With debugAddress it serves /debug/peers
// there meanwhile.
func (p *Plugin) Start(ctx context.Context, n fwkdl.PeerNotifier) error {
	if n == nil {
		return errors.New("peer discovery: Start needs a PeerNotifier")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	if p.debugAddr != "" {
		l, err := net.Listen("tcp", p.debugAddr)
		if err != nil {
			return fmt.Errorf("%s: debugAddress=%s: %w", p.typedName, p.debugAddr, err)
		}
		go func() { served <- p.serveDebug(ctx, l) }()
	} else {
		served <- nil
	}
	err := p.discovery.Start(ctx, notifier{n})
	cancel()
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}

// serveDebug serves /debug/peers on l until ctx ends.
func (p *Plugin) serveDebug(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/debug/peers", p.view)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			_ = srv.Close()
		}
	}()
	p.log.Info("serving /debug/peers", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: serving /debug/peers: %w", p.typedName, err)
	}
	return nil
}

// Ready implements fwkdl.PeerDiscovery: closed once the notifier given to Start
// holds the initial peer set.
func (p *Plugin) Ready() <-chan struct{} { return p.discovery.Ready() }

// DumpState implements fwkplugin.StateDumper: the /debug/peers document, which the
// EPP serves at /debug/plugins/state on its metrics port.
func (p *Plugin) DumpState() (json.RawMessage, error) { return json.RawMessage(p.view.JSON()), nil }

// Peers reads the peer set this plugin delivers (for a consumer in the same EPP,
// such as a cross-replica syncer).
func (p *Plugin) Peers() peers.Reader { return p.discovery.Peers() }

// Status is the discovery's status: synced, and the last error.
func (p *Plugin) Status() discovery.Status { return p.discovery.Status() }

// notifier turns this project's peer changes into the EPP's.
type notifier struct{ n fwkdl.PeerNotifier }

func (n notifier) UpsertPeer(p peers.PeerMetadata) {
	port := ""
	if p.Port > 0 {
		port = strconv.Itoa(int(p.Port))
	}
	n.n.Upsert(&fwkdl.PeerMetadata{ID: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, Address: p.Address, Port: port})
}

func (n notifier) DeletePeer(id string) {
	namespace, name, _ := strings.Cut(id, "/") // a namespace never holds a "/"
	n.n.Delete(types.NamespacedName{Namespace: namespace, Name: name})
}

// decode reads a plugin's parameters into v strictly (unknown fields are errors);
// nil or empty parameters leave v as it is.
func decode(typ string, params *json.Decoder, v any) error {
	if params == nil {
		return nil
	}
	params.DisallowUnknownFields()
	if err := params.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s parameters: %w", typ, err)
	}
	return nil
}

// validateDebugAddress checks the optional debugAddress parameter.
func validateDebugAddress(addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("invalid debugAddress=%q: want host:port, e.g. \":9091\"", addr)
	}
	return nil
}

// selfFromEnv is the replica's identity from the downward-API environment.
// getenv reads the environment (a variable, so tests may replace it).
var getenv = os.Getenv

func selfFromEnv(namespace string) (peers.Self, error) {
	return peers.SelfFromEnv(namespace, getenv, os.Hostname)
}

// logger is the plugin's logger.
func logger(typ, name string) logr.Logger {
	return ctrl.Log.WithName(typ).WithValues("plugin", name)
}

// duration is a JSON duration: "5s".
type duration struct{ time.Duration }

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d duration) String() string { return d.Duration.String() }
