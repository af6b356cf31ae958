package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
)

// modelsimFlags are the simulated servers' settings, shared by run and modelsim.
type modelsimFlags struct {
	cfg     modelsim.Config
	speedup float64
}

// register adds the flags to fs, with capacity blocks as the KV cache's default
// and page as the metrics page's.
func (m *modelsimFlags) register(fs *flag.FlagSet, capacity int, page modelsim.MetricsPage) {
	m.cfg = modelsim.DefaultConfig()
	m.cfg.CapacityBlocks = capacity
	m.cfg.Page = page
	fs.Func("metrics-page", fmt.Sprintf("what each server's /metrics renders: %q (a vLLM v1 server's page, histograms included) or %q (the families llm-d-router reads; default %q)", modelsim.VLLMPage, modelsim.CorePage, page),
		func(v string) error { m.cfg.Page = modelsim.MetricsPage(v); return nil })
	fs.IntVar(&m.cfg.CapacityBlocks, "capacity-blocks", m.cfg.CapacityBlocks, "each server's KV cache, in blocks")
	fs.IntVar(&m.cfg.BlockTokens, "block-tokens", m.cfg.BlockTokens, "tokens per KV-cache block")
	fs.IntVar(&m.cfg.MaxRunning, "max-running", m.cfg.MaxRunning, "requests a server runs at once at most (vLLM's max_num_seqs)")
	fs.IntVar(&m.cfg.MaxBatchedTokens, "max-batched-tokens", m.cfg.MaxBatchedTokens, "a step's token budget (vLLM's max_num_batched_tokens)")
	fs.DurationVar(&m.cfg.StepBase, "step-base", m.cfg.StepBase, "a step's fixed cost (simulated)")
	fs.DurationVar(&m.cfg.StepPerSequence, "step-per-sequence", m.cfg.StepPerSequence, "a step's cost per decoding request (simulated)")
	fs.DurationVar(&m.cfg.PrefillPerToken, "prefill-per-token", m.cfg.PrefillPerToken, "a step's cost per prefilled token (simulated)")
	fs.StringVar(&m.cfg.Model, "model", m.cfg.Model, "the served model's name")
	fs.Float64Var(&m.speedup, "speedup", 4, "simulated seconds per wall-clock second")
}

func (m *modelsimFlags) validate() error {
	if err := m.cfg.Validate(); err != nil {
		return fmt.Errorf("model server flags: %w", err)
	}
	if m.speedup <= 0 {
		return fmt.Errorf("--speedup=%v: want a positive factor", m.speedup)
	}
	return nil
}

// modelsimMain serves simulated model servers on 127.0.0.1 (or --host) until
// SIGTERM or SIGINT: server i on --port+i.
func modelsimMain(args []string) error {
	fs := flag.NewFlagSet("modelsim", flag.ExitOnError)
	var m modelsimFlags
	m.register(fs, modelsim.DefaultConfig().CapacityBlocks, modelsim.VLLMPage)
	servers := fs.Int("servers", 8, "how many servers")
	host := fs.String("host", "127.0.0.1", "the address the servers listen on")
	port := fs.Int("port", 8000, "server i listens on port+i")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := m.validate(); err != nil {
		return err
	}
	if *servers < 1 || *port < 1 || *port+*servers-1 > 65535 {
		return fmt.Errorf("--servers=%d --port=%d: want at least one server, on ports 1..65535", *servers, *port)
	}
	ls, err := modelsim.Listen(*host, *port, *servers)
	if err != nil {
		return err
	}
	fleet, err := modelsim.StartFleet(m.cfg, modelsim.NewClock(m.speedup), ls, 10*time.Millisecond)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "modelsim: %d servers of %s (KV cache %d blocks of %d tokens, speed-up %v) on %s\n",
		*servers, m.cfg.Model, m.cfg.CapacityBlocks, m.cfg.BlockTokens, m.speedup, strings.Join(fleet.Addrs, " "))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	<-ctx.Done()
	return fleet.Stop()
}
