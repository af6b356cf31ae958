package sharedprefix_test

import (
	"fmt"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/sharedprefix"
)

// An EPP built with this package registers the plugin type once, before it reads
// its configuration. The configuration then names a shared-prefix-cache-producer
// with the peer-syncer that carries its placements to the other replicas, and
// points upstream's prefix-cache-scorer at it in place of upstream's own index.
// The index's state is served at DebugPath on the peer discovery plugin's debug
// address, and its placements travel on the broadcast BroadcastName.
func Example() {
	sharedprefix.Register()
	_, registered := fwkplugin.Registry[sharedprefix.Type]
	fmt.Println("registered:", registered)

	fmt.Print(`plugins:
  - name: shared-prefix
    type: ` + sharedprefix.Type + `
    parameters:
      peerSyncerRef: peer-syncer
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: shared-prefix
`)
	fmt.Println("state:", sharedprefix.DebugPath("shared-prefix"))
	fmt.Println("broadcast:", sharedprefix.BroadcastName("shared-prefix"))
	// Output:
	// registered: true
	// plugins:
	//   - name: shared-prefix
	//     type: shared-prefix-cache-producer
	//     parameters:
	//       peerSyncerRef: peer-syncer
	//   - type: prefix-cache-scorer
	//     parameters:
	//       prefixMatchInfoProducerName: shared-prefix
	// state: /debug/shared-prefix/shared-prefix
	// broadcast: prefix/shared-prefix
}
