//go:build e2e

package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gruntwork-io/terratest/modules/helm"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/podproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/extproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/testsupport/otlpsink"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/wait"
)

// TestTracing (local backend): a request through the EPP that the chart deploys,
// carrying a sampled W3C trace context (so that any sampler records it). With the
// chart's defaults, the EPP records no span: nothing of the trace on its stdout,
// where the EPP's own default (--tracing on, console exporter) would print it, and
// its logs are JSON. With router.tracing.enabled and the endpoint of a stand-in OTLP
// collector on 127.0.0.1, the request's spans reach the collector, with the pod's
// service name, namespace and name, and none is on stdout. The process is stopped
// (the release uninstalled) before its stdout is read, so the EPP has flushed
// whatever it recorded.
func TestTracing(t *testing.T) {
	if backend != "local" {
		t.Skip("tracing runs on the local backend: its stand-in collector listens on 127.0.0.1 of this machine, which kind's pods cannot reach")
	}
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Stop)
	for _, tc := range []struct {
		name   string
		values map[string]string
		spans  bool // to the collector
	}{
		{"chart defaults", nil, false},
		{"router.tracing.enabled", map[string]string{"router.tracing.enabled": "true", "router.tracing.otelExporterEndpoint": sink.Endpoint}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := "e2e-tracing-" + utilrand.String(5)
			createNamespace(t, ns, true)
			rt := runPods(t, ns)

			set := map[string]string{"router.epp.replicas": "1"}
			for k, v := range tc.values {
				set[k] = v
			}
			opts := &helm.Options{KubectlOptions: kubectlOptions(ns), SetValues: set, ExtraArgs: map[string][]string{"install": {"--wait", "--timeout", "3m"}}}
			helm.InstallContext(t, ctx, opts, filepath.Join(repoRoot, "charts", "epp"), "epp")
			uninstalled := false
			t.Cleanup(func() {
				if !uninstalled {
					helm.DeleteContext(t, context.Background(), opts, "epp", true)
				}
			})
			epp := runningEPP(t, rt)

			traceID, traceparent := newTraceContext(t)
			answer, err := sendUntilAnswered(epp.ExtProcAddr, traceparent)
			if err != nil {
				t.Fatalf("%v\n--- EPP output:\n%s", err, logOf(rt))
			}
			t.Logf("request with trace %s: the EPP %s", traceID, answer)

			if tc.spans {
				// The batch span processor exports every 5 s.
				var got []otlpsink.Span
				wait.ForEvery(&eppOutputOnFailure{T: t, rt: rt}, 30*time.Second, 250*time.Millisecond, func() string {
					if got = sink.Trace(traceID); len(got) == 0 {
						return fmt.Sprintf("no span of trace %s reached the collector at %s (it holds %d spans)", traceID, sink.Endpoint, len(sink.Spans()))
					}
					return ""
				})
				var names []string
				for _, sp := range got {
					names = append(names, sp.Name)
				}
				res := got[0].Resource
				t.Logf("the collector received %d spans of trace %s: %s; resource %v", len(got), traceID, strings.Join(names, ", "), res)
				if res["service.name"] != "llm-d-router/epp" || res["k8s.namespace.name"] != ns || res["k8s.pod.name"] != epp.pod {
					t.Errorf("span resource %v: want service.name llm-d-router/epp, k8s.namespace.name %s, k8s.pod.name %s", res, ns, epp.pod)
				}
			} else if n := len(sink.Trace(traceID)); n > 0 {
				t.Errorf("tracing off, yet the collector received %d spans of trace %s", n, traceID)
			}

			// Stop the EPP (it flushes its spans on the way out), then read its stdout.
			helm.DeleteContext(t, ctx, opts, "epp", true)
			uninstalled = true
			select {
			case <-epp.proc.Exited():
			case <-time.After(60 * time.Second):
				t.Fatalf("the EPP of pod %s did not stop within 60s of the uninstall", epp.pod)
			}
			stdout := epp.proc.Stdout()
			if strings.Contains(stdout, traceID) || strings.Contains(stdout, `"SpanContext"`) {
				t.Fatalf("the EPP printed spans on its stdout:\n%s", stdout)
			}
			checkJSONLogs(t, epp.proc)
		})
	}
}

// theEPP is the one running replica's EPP process.
type theEPP struct {
	pod  string
	proc *podproc.Process
	// ExtProcAddr is where it serves ext_proc (127.0.0.1).
	ExtProcAddr string
}

// runningEPP waits (at most 60 s) until the runtime runs the release's one replica.
func runningEPP(t *testing.T, rt *podproc.Runtime) theEPP {
	t.Helper()
	var epp theEPP
	wait.ForEvery(t, 60*time.Second, 100*time.Millisecond, func() string {
		for _, r := range rt.Replicas() {
			if p := r.Process(eppContainer); p != nil && p.ExtProcAddr != "" {
				epp = theEPP{pod: r.Pod, proc: p, ExtProcAddr: p.ExtProcAddr}
				return ""
			}
		}
		return fmt.Sprintf("no EPP process (runtime errors: %v)", rt.Errors())
	})
	return epp
}

// newTraceContext returns a new trace ID and a traceparent header of it, sampled.
func newTraceContext(t *testing.T) (traceID, traceparent string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID = hex.EncodeToString(b[:16])
	return traceID, fmt.Sprintf("00-%s-%s-01", traceID, hex.EncodeToString(b[16:]))
}

// sendUntilAnswered sends the request until the EPP answers it (its ext_proc
// server may not serve yet), at most 10 times, 5 s each.
func sendUntilAnswered(addr, traceparent string) (extproc.Answer, error) {
	var err error
	for range 10 {
		var a extproc.Answer
		if a, err = extproc.Send(addr, traceparent, 5*time.Second); err == nil {
			return a, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return extproc.Answer{}, fmt.Errorf("the EPP at %s answered no request in 10 attempts: %w", addr, err)
}

// checkJSONLogs: every line the EPP wrote is a JSON object (its logs, as upstream's
// chart has them with --zap-encoder json).
func checkJSONLogs(t *testing.T, p *podproc.Process) {
	t.Helper()
	lines := 0
	for line := range strings.Lines(p.Log()) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		lines++
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
	}
	if lines == 0 {
		t.Fatal("the EPP wrote no log")
	}
}

// eppOutputOnFailure is t, whose Fatalf adds the output of the runtime's replicas
// (for a wait that fails).
type eppOutputOnFailure struct {
	*testing.T
	rt *podproc.Runtime
}

func (e *eppOutputOnFailure) Fatalf(format string, args ...any) {
	e.Helper()
	e.T.Fatalf("%s\n--- EPP output:\n%s", fmt.Sprintf(format, args...), logOf(e.rt))
}

// logOf is the output of the runtime's replicas, for failure reports.
func logOf(rt *podproc.Runtime) string {
	var b strings.Builder
	for _, r := range rt.Replicas() {
		fmt.Fprintf(&b, "[pod %s]\n%s", r.Pod, r.Log())
	}
	return b.String()
}
