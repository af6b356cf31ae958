// Package sources is the one list of the peer sources this project ships. The epp
// binary takes the flags of each (package app), and llm-d-router's EPP gets a plugin
// type of each, "<name>-peer-discovery" (llmdrouter/peerdiscovery), both from the
// source's discovery.SourceSpec. A new source is a package that implements
// discovery.Source and offers its SourceSpec, plus one line in All.
package sources

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/dnssrv"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/endpointslice"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peerfile"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/podwatch"
)

// All are the peer sources, in the order of their flags in the binary's help.
func All() []discovery.SourceSpec {
	return []discovery.SourceSpec{
		endpointslice.Spec(),
		peerfile.Spec(),
		dnssrv.Spec(),
		podwatch.Spec(),
	}
}
