package app

import (
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/discovery"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/sources"
)

// Sources are the peer sources the binary knows, in the order of their flags.
type Sources []discovery.SourceSpec

// DefaultSources are the sources of the epp binary: the project's list
// (sources.All), which llm-d-router's EPP plugins read too.
func DefaultSources() Sources { return sources.All() }
