// Command epp runs EPP peer discovery and shows its peer view at /debug/peers.
// See docs/REFERENCE.md for its flags and docs/DEPLOY.md for examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/app"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/kubeconfig"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/internal/postrender"
	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peercheck"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check-peers" {
		os.Exit(checkPeers(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "post-render" {
		os.Exit(postRender(os.Args[2:]))
	}
	opts, err := app.Parse(os.Args[1:], getenv, os.Stderr)
	switch {
	case errors.Is(err, app.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintf(os.Stderr, "epp: %v\n", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseFlagOptions(&opts.Zap))
	ctrl.SetLogger(log)
	klog.SetLogger(log)

	a, err := app.New(opts, nil, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		// One line: the servers close, the source stops, the snapshot file (if any)
		// is written once more; a second signal exits at once.
		log.Info("stopping", "signal", sig.String(), "within", app.ShutdownTimeout.String())
		cancel()
		<-signals
		os.Exit(1)
	}()
	if err := a.Run(ctx); err != nil {
		log.Error(err, "epp stopped")
		os.Exit(1)
	}
}

// getenv is os.Getenv, except that HOSTNAME, when unset, is the kernel's host name
// (the Pod's name in Kubernetes): the replica's name without POD_NAME.
func getenv(key string) string {
	v := os.Getenv(key)
	if v == "" && key == "HOSTNAME" {
		v, _ = os.Hostname()
	}
	return v
}

// checkPeers runs `epp check-peers` (the chart's helm test): in the cluster, every
// replica of the Service must list exactly the other replicas.
func checkPeers(args []string) int {
	o, err := peercheck.Flags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: %v\n", err)
		return 2
	}
	cfg, err := kubeconfig.Load("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: check-peers: %v\n", err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: check-peers: %v\n", err)
		return 1
	}
	if err := peercheck.Run(context.Background(), cs, &http.Client{}, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "epp: check-peers: %v\n", err)
		return 1
	}
	return 0
}

// helmStderr is where a post-render error reaches the user. Helm 3 passes the
// post-renderer's stderr through; Helm 4 (v4.3.2) runs a postrenderer/v1 plugin with
// its stderr captured and then drops it, printing only "plugin ... exited with
// error". As that plugin (HELM_PLUGIN_NAME is set) on Linux, the message is also
// written to helm's own stderr (its /proc/<ppid>/fd/2), so the user reads why.
func helmStderr() io.Writer {
	if os.Getenv("HELM_PLUGIN_NAME") == "" {
		return os.Stderr
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return os.Stderr
	}
	return io.MultiWriter(os.Stderr, f)
}

// postRender runs `epp post-render`, a Helm post-renderer: the manifests of an EPP
// chart on stdin, the same with peer discovery on stdout (see package postrender).
func postRender(args []string) int {
	o, err := postrender.Flags(args, helmStderr())
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(helmStderr(), "epp: post-render: %v\n", err)
		return 2
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "epp: post-render: reading stdin: %v\n", err)
		return 1
	}
	out, err := postrender.Render(in, o)
	if err != nil {
		fmt.Fprintf(helmStderr(), "epp: post-render: %v\n", err)
		return 1
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintf(os.Stderr, "epp: post-render: %v\n", err)
		return 1
	}
	return 0
}
