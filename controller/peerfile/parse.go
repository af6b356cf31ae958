package peerfile

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// MaxSize is the largest peers file accepted.
const MaxSize = 1 << 20

// Defaults fill fields an entry leaves out.
type Defaults struct {
	// Namespace of entries without one.
	Namespace string
	// Port of entries without one.
	Port int32
}

// file is what a peers file must hold: a peers list. Every other field, here and in
// the entries, is accepted and ignored, so that a newer writer's /debug/peers
// document (fields are only ever added) is a peers file for an older reader. A typo
// cannot empty the set silently all the same: without "peers" the file is refused,
// and an entry without "name" or "address" too.
type file struct {
	Peers *[]entry `json:"peers"`
}

// entry is one peer: what a hand-written file gives, or a /debug/peers entry (whose
// other fields, such as what the writer's reachability probes found, are each
// replica's own view and are ignored).
type entry struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Address   string `json:"address"`
	Port      *int64 `json:"port,omitempty"`
	// The conditions, as the /debug/peers document gives them; a peer without them
	// is ready, serving and not terminating.
	Ready       *bool `json:"ready,omitempty"`
	Serving     *bool `json:"serving,omitempty"`
	Terminating *bool `json:"terminating,omitempty"`
}

// Parse reads a peers file's content. The result is ordered by ID. The error names
// the entry (by index and name) and the field at fault.
func Parse(data []byte, def Defaults) ([]peers.PeerMetadata, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("file is %d bytes, larger than the limit of %d (1 MiB)", len(data), MaxSize)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("file is empty: write {\"peers\": []} for no peers")
	}
	var f file
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a peers document: %w", err)
	}
	if f.Peers == nil {
		return nil, errors.New(`no "peers" field: write {"peers": []} for no peers`)
	}
	out := make([]peers.PeerMetadata, 0, len(*f.Peers))
	seen := make(map[string]int, len(*f.Peers))
	for i, e := range *f.Peers {
		p, err := e.metadata(def)
		if err != nil {
			return nil, fmt.Errorf("peers[%d] (%s): %w", i, e.label(), err)
		}
		if j, dup := seen[p.ID()]; dup {
			return nil, fmt.Errorf("peers[%d] (%s): id: duplicate of peers[%d]: each namespace/name may appear once", i, e.label(), j)
		}
		seen[p.ID()] = i
		out = append(out, p)
	}
	peers.SortByID(out)
	return out, nil
}

func (e entry) label() string {
	if e.Name == "" {
		return "no name"
	}
	return "name " + e.Name
}

func (e entry) metadata(def Defaults) (peers.PeerMetadata, error) {
	p := peers.PeerMetadata{Namespace: e.Namespace, Name: e.Name, Port: def.Port, Ready: true}
	if e.Ready != nil {
		p.Ready = *e.Ready
	}
	p.Serving = p.Ready
	if e.Serving != nil {
		p.Serving = *e.Serving
	}
	if e.Terminating != nil {
		p.Terminating = *e.Terminating
	}
	if p.Namespace == "" {
		p.Namespace = def.Namespace
	}
	if p.Name == "" {
		return p, errors.New("name: required")
	}
	if strings.Contains(p.Name, "/") {
		return p, fmt.Errorf("name: %q must not contain '/'", p.Name)
	}
	if errs := validation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
		return p, fmt.Errorf("namespace: %q: %s", p.Namespace, strings.Join(errs, "; "))
	}
	if e.ID != "" && e.ID != p.ID() {
		return p, fmt.Errorf("id: %q does not match namespace/name %q", e.ID, p.ID())
	}
	if e.Address == "" {
		return p, errors.New("address: required")
	}
	addr, err := netip.ParseAddr(e.Address)
	if err != nil || addr.Zone() != "" {
		return p, fmt.Errorf("address: %q is not an IPv4 or IPv6 address (write IPv6 without brackets)", e.Address)
	}
	p.Address = addr.Unmap().String()
	if e.Port != nil {
		if *e.Port < 1 || *e.Port > 65535 {
			return p, fmt.Errorf("port: %d is outside 1..65535", *e.Port)
		}
		p.Port = int32(*e.Port)
	}
	return p, nil
}
