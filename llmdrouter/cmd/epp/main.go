// Command epp is llm-d-router's Endpoint Picker with epp-peer-discovery: upstream's
// runner, unchanged, with this module's plugins registered and the configured peer
// discovery started (package wiring). Every flag and configuration of upstream's EPP
// works as there; dataLayer.peerDiscovery.pluginRef now takes effect.
package main

import (
	"os"

	"github.com/llm-d/llm-d-router/cmd/epp/runner"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/wiring"
)

func main() {
	llmdrouter.Register()
	ctx := ctrl.SetupSignalHandler()
	os.Exit(wiring.Run(ctx, runner.NewRunner(), os.Args[1:]))
}
