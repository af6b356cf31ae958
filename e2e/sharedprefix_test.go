//go:build e2e

package e2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gruntwork-io/terratest/modules/helm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// TestSharedPrefixIndexLoads (local backend): the EPP configuration the chart
// renders with router.epp.stateSync.sharedPrefixIndex.enabled (peer discovery, state
// sync, shared-prefix-cache-producer read by prefix-cache-scorer) is one that
// llm-d-router's EPP starts with: its gRPC readiness serves, its /metrics has the
// shared index of the plugin shared-prefix, and it answers a request. One replica:
// with more, the syncers would dial each other's pod IPs, which are fake here (the
// shared index between replicas is proven in llmdrouter/sharedprefix's tests).
func TestSharedPrefixIndexLoads(t *testing.T) {
	stateSyncConfigLoads(t, "shared-prefix", "router.epp.stateSync.sharedPrefixIndex.enabled", `epp_shared_prefix_index_blocks{plugin="shared-prefix"}`)
}

// TestSharedScrapingLoads (local backend): likewise with
// router.epp.stateSync.sharedScraping.enabled (fleet-metrics-data-source in place of
// metrics-data-source, feeding core-metrics-extractor): the EPP starts with the
// plugin fleet-metrics (its series served), and it answers a request. Sharing between replicas is proven in
// llmdrouter/fleetmetrics's tests and llmdrouter/integration's, with real EPPs.
func TestSharedScrapingLoads(t *testing.T) {
	stateSyncConfigLoads(t, "shared-scraping", "router.epp.stateSync.sharedScraping.enabled", `epp_fleet_metrics_scrapes_total{mode="owned",plugin="fleet-metrics"}`)
}

// stateSyncConfigLoads installs the chart with one replica, peer discovery, state
// sync and value on, and checks that the EPP is ready, serves metric and answers.
func stateSyncConfigLoads(t *testing.T, name, value, metric string) {
	if backend != "local" {
		t.Skip("runs on the local backend; on kind, llmdrouter/e2ekind runs state sync with three replicas")
	}
	ctx := context.Background()
	ns := "e2e-" + name + "-" + utilrand.String(5)
	createNamespace(t, ns, true)
	rt := runPods(t, ns)

	opts := &helm.Options{KubectlOptions: kubectlOptions(ns), SetValues: map[string]string{
		"router.epp.replicas":              "1",
		"router.epp.peerDiscovery.enabled": "true",
		"router.epp.stateSync.enabled":     "true",
		value:                              "true",
	}, ExtraArgs: map[string][]string{"install": {"--wait", "--timeout", "3m"}}}
	helm.InstallContext(t, ctx, opts, filepath.Join(repoRoot, "charts", "epp"), "epp")
	t.Cleanup(func() { helm.DeleteContext(t, context.Background(), opts, "epp", true) })
	epp := runningEPP(t, rt)

	// Ready: the EPP's own gRPC readiness (KWOK marks every pod ready; this is the
	// process's answer), which includes its plugins' readiness.
	conn, err := grpc.NewClient(epp.proc.ProbeAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wait.ForEvery(&eppOutputOnFailure{T: t, rt: rt}, 60*time.Second, 250*time.Millisecond, func() string {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		cancel()
		status := resp.GetStatus().String()
		if err != nil {
			status = err.Error()
		}
		if status != healthpb.HealthCheckResponse_SERVING.String() {
			return "the EPP's readiness: " + status
		}
		return ""
	})

	// The plugin's series are there once the EPP has built it.
	wait.ForEvery(&eppOutputOnFailure{T: t, rt: rt}, 30*time.Second, 250*time.Millisecond, func() string {
		metrics, err := peerview.FetchMetrics(ctx, epp.proc.MetricsAddr)
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(metrics, metric) {
			return "/metrics has no " + metric
		}
		return ""
	})
	traceID, traceparent := newTraceContext(t)
	answer, err := sendUntilAnswered(epp.ExtProcAddr, traceparent)
	if err != nil {
		t.Fatalf("%v\n--- EPP output:\n%s", err, logOf(rt))
	}
	t.Logf("%s: ready, %s served; a request (trace %s): the EPP %s", value, metric, traceID, answer)
}
