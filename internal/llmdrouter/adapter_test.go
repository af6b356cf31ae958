package llmdrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/llmdrouter"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/llmdrouter/upstream"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/slicegen"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, "llm-d-router adapter tests", func(e *testenv.Env) { env = e })
}

// recorder is an upstream.PeerNotifier that, like the EPP's, is not safe for
// concurrent use; it notes the goroutine of every call so that the test can tell.
type recorder struct {
	mu         sync.Mutex // for the test's reads only
	calls      []string
	goroutines map[uint64]bool
}

func (r *recorder) note(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	r.goroutines[goroutineID()] = true
}

func (r *recorder) Upsert(p *upstream.PeerMetadata) {
	r.note(fmt.Sprintf("upsert %s %s:%s", p.ID, p.Address, p.Port))
}
func (r *recorder) Delete(id types.NamespacedName) { r.note("delete " + id.String()) }

func (r *recorder) seen() ([]string, map[uint64]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), r.goroutines
}

func goroutineID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _ := strconv.ParseUint(strings.Fields(strings.TrimPrefix(string(buf[:n]), "goroutine "))[0], 10, 64)
	return id
}

// TestAdapterInAnEPPManager runs the plugin the way llm-d-router's EPP does: built
// by the factory from JSON parameters, SetupWithManager before the manager starts,
// then Start with a notifier that is not goroutine-safe, and Ready.
func TestAdapterInAnEPPManager(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, err := env.CreateNamespace(ctx, "llmd", nil)
	if err != nil {
		t.Fatal(err)
	}
	slicesAPI := env.Clientset.DiscoveryV1().EndpointSlices(ns)
	a := slicegen.Slice("epp-a", slicegen.Namespace(ns),
		slicegen.Pod("epp-0", "10.0.0.1"), slicegen.Pod("epp-1", "10.0.0.2"), slicegen.Pod("epp-2", "10.0.0.3"))
	if _, err := slicesAPI.Create(ctx, &a, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Setenv("POD_NAME", "epp-0")
	params := fmt.Sprintf(`{"service": "epp", "namespace": %q}`, ns)
	plugin, err := llmdrouter.Factory("peers", json.NewDecoder(strings.NewReader(params)), nil)
	if err != nil {
		t.Fatal(err)
	}
	pd := plugin.(upstream.PeerDiscovery)
	if got := pd.TypedName(); got != (upstream.TypedName{Type: llmdrouter.PluginType, Name: "peers"}) {
		t.Fatalf("TypedName %+v", got)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.(upstream.ManagerSetup).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pd.Ready():
		t.Fatal("Ready closed before the manager started")
	default:
	}

	rec := &recorder{goroutines: map[uint64]bool{}}
	startGoroutine := make(chan uint64, 1)
	startDone := make(chan error, 1)
	go func() {
		startGoroutine <- goroutineID()
		startDone <- pd.Start(ctx, rec)
	}()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()

	select {
	case <-pd.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("Ready not closed 30s after the manager started")
	}
	// Ready means the notifier holds the initial set: no waiting.
	if calls, _ := rec.seen(); len(calls) != 2 {
		t.Fatalf("right after Ready the notifier got %q, want the initial 2 peers", calls)
	}
	waitFor := func(step string, n int) []string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			calls, _ := rec.seen()
			if len(calls) >= n {
				return calls
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: calls %q, want %d", step, calls, n)
			}
		}
	}
	calls := waitFor("initial set", 2)
	if want := []string{"upsert " + ns + "/epp-1 10.0.0.2:9005", "upsert " + ns + "/epp-2 10.0.0.3:9005"}; !slices.Equal(calls, want) {
		t.Fatalf("initial calls %q, want %q", calls, want)
	}

	// A peer comes, then goes: its upsert arrives before its delete.
	b := slicegen.Slice("epp-b", slicegen.Namespace(ns), slicegen.Pod("epp-3", "10.0.0.4"))
	if _, err := slicesAPI.Create(ctx, &b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("epp-3 upserted", 3)
	if err := slicesAPI.Delete(ctx, "epp-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	calls = waitFor("epp-3 deleted", 4)
	if want := []string{"upsert " + ns + "/epp-3 10.0.0.4:9005", "delete " + ns + "/epp-3"}; !slices.Equal(calls[2:], want) {
		t.Fatalf("calls after epp-3 came and went %q, want %q", calls[2:], want)
	}

	cancel()
	if err := <-startDone; err != nil {
		t.Fatalf("Start returned %v when its context ended", err)
	}
	if err := <-mgrDone; err != nil {
		t.Fatalf("manager: %v", err)
	}
	_, goroutines := rec.seen()
	if g := <-startGoroutine; len(goroutines) != 1 || !goroutines[g] {
		t.Fatalf("notifier called from goroutines %v, want only Start's (%d)", goroutines, g)
	}
}

func TestFactoryRefusesBadParameters(t *testing.T) {
	t.Setenv("POD_NAME", "epp-0")
	t.Setenv("NAMESPACE", "ns")
	for params, want := range map[string]string{
		`{"service": "EPP.svc"}`: `invalid service="EPP.svc"`,
		`{"servce": "epp"}`:      `unknown field "servce"`,
		`{}`:                     `service is required`,
		`{"service": "epp", "membership": "leader"}`: `invalid membership="leader"`,
		`{"service": "epp", "port": "9005"}`:         `cannot unmarshal string`,
	} {
		_, err := llmdrouter.Factory("peers", json.NewDecoder(strings.NewReader(params)), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Factory(%s) = %v, want an error with %q", params, err, want)
		}
	}
}

func TestStartBeforeSetupWithManagerIsAnError(t *testing.T) {
	t.Setenv("POD_NAME", "epp-0")
	plugin, err := llmdrouter.Factory("peers", json.NewDecoder(strings.NewReader(`{"service": "epp", "namespace": "ns"}`)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := plugin.(upstream.PeerDiscovery).Start(ctx, &recorder{goroutines: map[uint64]bool{}}); err == nil || !strings.Contains(err.Error(), "SetupWithManager") {
		t.Fatalf("Start without SetupWithManager = %v", err)
	}
}
