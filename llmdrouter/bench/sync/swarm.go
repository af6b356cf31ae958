package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/netns"
	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/standin"
)

// swarmMain runs the other N-1 replicas of a cost run in one process: N-1 syncers,
// each with its own address, identity and listener, each publishing the same load
// as a replica and pushing to, and hearing from, the one measured replica (their
// membership is that replica alone, so the swarm costs the machine a fraction of
// N-1 full replicas, while the measured replica has N-1 peers as in an N-replica
// EPP). Replica i listens on netns.Addr(10+i):port(i).
func swarmMain(args []string) error {
	fs := flag.NewFlagSet("swarm", flag.ExitOnError)
	n := fs.Int("n", 29, "syncers in the swarm (replicas 1..n)")
	endpoints := fs.Int("endpoints", 100, "endpoints whose in-flight load each publishes")
	interval := fs.Duration("interval", 200*time.Millisecond, "push interval")
	namespace := fs.String("namespace", "", "the replicas' namespace")
	target := fs.String("target", "", "the measured replica: name@ip:port")
	ports := fs.String("ports", "", "the swarm's peer-sync ports, comma-separated, replica 1 first")
	change := fs.Float64("change", 1, "the share of endpoints whose value changes every interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	tname, taddr, ok := strings.Cut(*target, "@")
	if !ok {
		return fmt.Errorf("--target=%q: want name@ip:port", *target)
	}
	tap, err := netip.ParseAddrPort(taddr)
	if err != nil {
		return fmt.Errorf("--target=%q: %w", *target, err)
	}
	ps, err := parseInts(*ports)
	if err != nil {
		return fmt.Errorf("--ports: %w", err)
	}
	if len(ps) != *n {
		return fmt.Errorf("--ports: %d ports, want %d", len(ps), *n)
	}
	spec, err := inflightSpec(fwkplugin.NewEppHandle(ctx, nil, fwkplugin.WithMetricsRecorder(prometheus.NewRegistry())))
	if err != nil {
		return err
	}
	key := spec.StateKey
	eps := endpointNames(*endpoints)
	measured := peers.PeerMetadata{Namespace: *namespace, Name: tname, Address: tap.Addr().String(), Port: int32(tap.Port()), Ready: true, Serving: true}
	for i := 1; i <= *n; i++ {
		s, err := standin.Peer(*namespace, fmt.Sprintf("epp-%d", i), netns.Addr(10+i), ps[i-1], measured, *interval, 0)
		if err != nil {
			return err
		}
		go func() { _ = s.Run(ctx) }()
		set := func(k, ep string, v any) { _ = s.Set(k, ep, v) }
		go publish(ctx, set, string(key), eps, *interval, int64(i), *change)
	}
	<-ctx.Done()
	return nil
}
