// Package llmdrouter is epp-peer-discovery for llm-d-router's Endpoint Picker (EPP):
// its plugins (peer discovery, a cross-replica state syncer over the discovered peers,
// a prefix-cache index shared over the syncer's connections, and a metrics data
// source that scrapes each model server once for the fleet), registered in the EPP's plugin registry with Register, and (in
// package wiring) the start of the configured peer discovery that the EPP's runner
// lacks. cmd/epp is an EPP build with both: upstream's runner, unchanged, plus these.
//
// A custom EPP main adds them with two lines (cmd/epp's main is this):
//
//	llmdrouter.Register()
//	os.Exit(wiring.Run(ctrl.SetupSignalHandler(), runner.NewRunner(), os.Args[1:]))
//
// A peer discovery of a third party's is registered the plain upstream way, before
// wiring.Run (fwkplugin.Register(type, stability, factory)): the wiring starts
// whichever plugin dataLayer.peerDiscovery.pluginRef names, as long as it implements
// datalayer.PeerDiscovery.
package llmdrouter

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/fleetmetrics"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peerdiscovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/peersyncer"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// Register registers every plugin type of this module in the EPP's plugin registry
// (see peerdiscovery.Register, peersyncer.Register, sharedprefix.Register and
// fleetmetrics.Register). Call it once, before the runner runs.
func Register() {
	peerdiscovery.Register()
	peersyncer.Register()
	sharedprefix.Register()
	fleetmetrics.Register()
}
