package main

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/llm-d/llm-d-router/pkg/epp/config/loader"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/internal/eppreplica"
)

// TestEveryConfigurationDecodes: each configuration's EPP configuration is one
// llm-d-router's loader decodes (strictly: a misplaced key fails), and the shared
// scraping's reads the model servers through the fleet's source alone, with
// upstream's injection of its own source off (or every replica would scrape every
// server again).
func TestEveryConfigurationDecodes(t *testing.T) {
	r := &eppreplica.Replica{Pod: "epp-7d9f8c6b5-r0", IP: "198.18.0.10", Debug: "127.0.0.1:20000", SyncPort: 20001} // never dialed
	for _, c := range configurations {
		cfg, _, err := loader.LoadRawConfig([]byte(c.config(r)), logr.Discard())
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.name != "shared-scraping" {
			continue
		}
		dl := cfg.DataLayer
		if dl == nil || dl.InjectDefaults == nil || *dl.InjectDefaults || len(dl.Sources) != 1 || dl.Sources[0].PluginRef != "fleet-metrics" {
			t.Errorf("shared-scraping's data layer: %+v, want fleet-metrics alone, injectDefaults false", dl)
		}
		for _, p := range cfg.Plugins {
			if p.Type == "metrics-data-source" || strings.Contains(string(p.Parameters), "metrics-data-source") {
				t.Errorf("shared-scraping keeps upstream's metrics source: %+v", p)
			}
		}
	}
}
