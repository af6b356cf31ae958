// Package postrender adds peer discovery to an EPP that another chart renders, as a
// Helm post-renderer: `helm install ... --post-renderer epp --post-renderer-args
// post-render`. It is how a release of llm-d-router's own chart
// (llm-d-router-standalone) gains peer discovery without switching charts.
//
// It finds the Deployment (or StatefulSet) with the EPP container, and adds, never
// removing or replacing anything the chart rendered but the image:
//
//   - to the EPP configuration the container reads (the --config-file in a ConfigMap
//     volume, or --config-text): the peer-discovery plugin and
//     dataLayer.peerDiscovery.pluginRef;
//   - to the EPP container: the plugin's settings as env (EPP_PEER_SERVICE,
//     EPP_PEER_DEBUG_ADDRESS, EPP_PEER_MEMBERSHIP), the downward-API identity it
//     lacks (POD_IP, POD_IPS), the ports peer-sync and http-peers, and the image of
//     llm-d-router's EPP with the plugin (--image);
//   - to the pod template: an annotation with the configuration's hash, so that a
//     changed configuration rolls the pods;
//   - to the Service that selects the pods: the ports peer-sync and http-peers;
//   - a namespaced Role and RoleBinding (endpointslices get, list, watch) for the
//     pods' ServiceAccount.
//
// Every arg, env, probe, volume and the ServiceAccount token of the chart stay.
package postrender

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/contract"
)

// Options say what to add.
type Options struct {
	// Container is the name of the EPP container ("epp").
	Container string
	// Image replaces the EPP container's image: llm-d-router's EPP with the plugin.
	// Empty keeps the chart's, unless that is upstream's own image (which has no
	// peer-discovery plugin): then it is an error.
	Image string
	// Service is the peer Service; empty: the Service that selects the EPP's pods.
	Service string
	// Membership is "ready" or "alive"; empty: "alive" when the EPP runs leader
	// election (its standbys are not ready), else "ready".
	Membership string
	// PortName and Port are the peer-sync port; DebugPort the plugin's /debug/peers.
	PortName  string
	Port      int
	DebugPort int
	// HelmTest adds a `helm test` hook: a Pod of the pods' ServiceAccount that runs
	// `epp check-peers` (image TestImage) against the peer Service, so that
	// `helm test <release>` proves every replica lists exactly the others. Only Helm
	// 4 reads hooks from a post-renderer's output (Helm 3 would create the Pod with
	// the release), so its plugin asks for it.
	HelmTest bool
	// TestImage is the image of the epp binary for the hook; empty: epp beside the
	// EPP's image when that is llm-d-router-epp (<prefix>/epp:<same tag>), else no
	// hook.
	TestImage string
}

// Defaults of Options.
const (
	DefaultContainer = "epp"
	DefaultPortName  = discovery.DefaultPortName
	DefaultPort      = discovery.DefaultPort
	DefaultDebugPort = contract.DefaultDebugPort
	// PluginName is the plugin's name in the EPP configuration (its metrics'
	// discovery label).
	PluginName = "peer-discovery"
	// upstreamImage is the repository of llm-d-router's own EPP image.
	upstreamImage = "llm-d-router-endpoint-picker"
)

type object = map[string]any

// Render reads the manifests a chart rendered (a YAML stream) and returns them with
// peer discovery added.
func Render(in []byte, o Options) ([]byte, error) {
	if o.Container == "" {
		o.Container = DefaultContainer
	}
	if _, err := peers.ParseMembership(o.Membership); err != nil {
		return nil, fmt.Errorf("--membership=%q: want ready or alive", o.Membership)
	}
	docs, err := decode(in)
	if err != nil {
		return nil, err
	}
	w, err := findWorkload(docs, o.Container)
	if err != nil {
		return nil, err
	}
	svc, err := findService(docs, w, o.Service)
	if err != nil {
		return nil, err
	}
	c := w.container
	args := stringList(c["args"])
	if o.Membership == "" {
		o.Membership = string(peers.MembershipReady)
		if slices.Contains(args, "--ha-enable-leader-election") || slices.Contains(args, "--ha-enable-leader-election=true") {
			o.Membership = string(peers.MembershipAlive) // only the leader is ready: the standbys must be peers too
		}
	}
	hash, err := addPlugin(docs, w, args)
	if err != nil {
		return nil, err
	}
	if err := setImage(c, o.Image); err != nil {
		return nil, err
	}
	r := contract.For(contract.Options{Service: svc.name, PortName: o.PortName, Port: int32(o.Port), DebugPort: int32(o.DebugPort), Membership: peers.Membership(o.Membership)})
	// The replica's identity, unless the chart gives it already (as upstream's
	// does for POD_NAME and NAMESPACE): kept as the chart has it.
	for _, e := range toObjects(r.Identity) {
		if !hasNamed(c, "env", e["name"]) {
			c["env"] = append(asAny(objects(c["env"])), e)
		}
	}
	for _, e := range toObjects(r.Env) {
		if err := addNamed(c, "env", e); err != nil {
			return nil, err
		}
	}
	// The pod's containers share one network: a port of another container, or of
	// the EPP under another name, on a number the plugin binds is a clash the API
	// server would not see (the EPP would fail to bind); on the Service it would,
	// after the rest of the release was applied.
	want := map[string]int{}
	for _, p := range r.ContainerPorts {
		want[p.Name] = int(p.ContainerPort)
	}
	if err := checkPodPorts(w, want); err != nil {
		return nil, err
	}
	if err := checkServicePorts(svc, want); err != nil {
		return nil, err
	}
	for _, p := range toObjects(r.ContainerPorts) {
		if err := addNamed(c, "ports", p); err != nil {
			return nil, err
		}
	}
	for _, p := range toObjects(r.ServicePorts) {
		if err := addNamed(svc.spec, "ports", p); err != nil {
			return nil, err
		}
	}
	meta := mapAt(w.template, "metadata")
	annotations := mapAt(meta, "annotations")
	annotations["epp-peer-discovery/config-sha256"] = hash
	docs = append(docs, rbac(w, svc.name, r.Rules)...)
	if o.HelmTest {
		if img := testImage(o.TestImage, stringOf(c["image"])); img != "" {
			docs = append(docs, testHook(w, svc.name, o.Membership, img))
		}
	}
	return encode(docs)
}

// Flags parses the arguments of `epp post-render` into Options.
func Flags(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("epp post-render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: helm install|upgrade|template ... --post-renderer epp --post-renderer-args post-render [--post-renderer-args --image=IMAGE ...]")
		fmt.Fprintln(stderr, "Reads the manifests a chart rendered on stdin and writes them with peer discovery added to the EPP on stdout.")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Image, "image", "", "image of llm-d-router's EPP with the peer-discovery plugin, for the EPP container (empty: keep the chart's, unless it is upstream's own)")
	fs.StringVar(&o.Container, "container", DefaultContainer, "name of the EPP container")
	fs.StringVar(&o.Service, "service", "", "the peer Service (empty: the one Service that selects the EPP's pods)")
	fs.StringVar(&o.Membership, "membership", "", "ready or alive (empty: alive when the EPP runs --ha-enable-leader-election, else ready)")
	fs.StringVar(&o.PortName, "port-name", DefaultPortName, "name of the peer-sync port")
	fs.IntVar(&o.Port, "port", DefaultPort, "number of the peer-sync port")
	fs.IntVar(&o.DebugPort, "debug-port", DefaultDebugPort, "port of the plugin's /debug/peers (http-peers)")
	fs.BoolVar(&o.HelmTest, "helm-test", false, "add a `helm test` hook that runs epp check-peers (Helm 4 only: the plugin epp-post-render sets it; Helm 3 does not read hooks from a post-renderer)")
	fs.StringVar(&o.TestImage, "test-image", "", "image of the epp binary for the --helm-test hook (empty: <prefix>/epp:<tag> beside an --image of <prefix>/llm-d-router-epp:<tag>, else no hook)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags are --name=value)", fs.Arg(0))
	}
	for name, p := range map[string]int{"--port": o.Port, "--debug-port": o.DebugPort} {
		if p < 1 || p > 65535 {
			return o, fmt.Errorf("%s=%d: want a port, 1-65535", name, p)
		}
	}
	if o.Port == o.DebugPort {
		return o, fmt.Errorf("--port and --debug-port are both %d", o.Port)
	}
	return o, nil
}
