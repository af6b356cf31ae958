package peerdiscovery

import fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"

// Probing reports whether p (a plugin of this package) probes its peers.
func Probing(p fwkplugin.Plugin) bool { return p.(*Plugin).prober != nil }
