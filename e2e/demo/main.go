// Command demo shows peer discovery working on a local control plane with real
// controllers (no Docker): it installs charts/epp with Helm and peer discovery on,
// runs llm-d-router's EPP with the plugin as one process per pod (bin/epp-llmd, by
// the e2e suite's process runtime), and prints a live table of every replica's own
// /debug/peers (the plugin's) while the release scales 3 -> 5 -> 2 and a pod is
// deleted. Then it uninstalls and stops everything.
// All traffic stays on 127.0.0.1; the fake pod IPs are never dialed.
//
// Usage (what `make demo` runs): go -C e2e run ./demo
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/localcluster"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/peerview"
	"github.com/epp-peer-discovery/epp-peer-discovery/e2e/podproc"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/testenv"
)

const (
	ns       = "demo"
	selector = "app.kubernetes.io/name=epp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type demo struct {
	root    string
	cluster *localcluster.Cluster
	rt      *podproc.Runtime
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	bins, err := localcluster.DefaultBinaries()
	if err != nil {
		return err
	}
	fmt.Println("== local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (fake node)")
	start := time.Now()
	cluster, err := localcluster.Start(ctx, bins, prefixWriter{})
	if cluster != nil {
		defer cluster.Stop()
	}
	if err != nil {
		return err
	}
	fmt.Printf("   up in %s\n", time.Since(start).Round(time.Millisecond))
	d := &demo{root: root, cluster: cluster}

	if err := d.helm(ctx, "install", "epp", filepath.Join(root, "charts", "epp"), "--namespace", ns, "--create-namespace",
		"--set", "router.epp.peerDiscovery.enabled=true", "--wait", "--timeout", "2m"); err != nil {
		return err
	}
	defer func() {
		fmt.Println("\n== helm uninstall epp")
		_ = d.helm(context.Background(), "uninstall", "epp", "--namespace", ns, "--wait")
	}()
	if d.rt, err = podproc.New(cluster.Config, podproc.DefaultBinaries(root), ns, selector, "epp"); err != nil {
		return err
	}
	rtCtx, stopRT := context.WithCancel(ctx)
	go d.rt.Run(rtCtx)
	defer func() { stopRT(); d.rt.Wait() }()

	steps := []struct {
		title string
		do    func() error
	}{
		{"helm install epp charts/epp --set router.epp.peerDiscovery.enabled=true (3 replicas of llm-d-router's EPP)", func() error { return nil }},
		{"helm upgrade: scale 3 -> 5", func() error { return d.scale(ctx, 5) }},
		{"helm upgrade: scale 5 -> 2", func() error { return d.scale(ctx, 2) }},
		{"kubectl delete pod (the Deployment replaces it)", func() error { return d.deleteOnePod(ctx) }},
	}
	for _, s := range steps {
		fmt.Printf("\n== %s\n", s.title)
		begin := time.Now()
		if err := s.do(); err != nil {
			return err
		}
		if err := d.watch(ctx, 60*time.Second); err != nil {
			return err
		}
		fmt.Printf("   every replica lists exactly the other replicas, %s after the change\n", time.Since(begin).Round(time.Millisecond))
	}
	return nil
}

func (d *demo) helm(ctx context.Context, args ...string) error {
	args = append(args, "--kubeconfig", d.cluster.Kubeconfig)
	cmd := exec.CommandContext(ctx, filepath.Join(d.root, "bin", "helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+os.TempDir()+"/epp-demo-helm", "HELM_CONFIG_HOME="+os.TempDir()+"/epp-demo-helm", "HELM_DATA_HOME="+os.TempDir()+"/epp-demo-helm")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %v: %w\n%s", args[:2], err, out)
	}
	return nil
}

func (d *demo) scale(ctx context.Context, n int) error {
	return d.helm(ctx, "upgrade", "epp", filepath.Join(d.root, "charts", "epp"), "--namespace", ns, "--reuse-values",
		"--set", "router.epp.replicas="+strconv.Itoa(n))
}

func (d *demo) deleteOnePod(ctx context.Context) error {
	s, err := peerview.Read(ctx, d.cluster.Clientset, ns, "epp", selector)
	if err != nil || len(s.Live) == 0 {
		return fmt.Errorf("no pod to delete: %w", err)
	}
	fmt.Printf("   deleting pod %s\n", s.Live[0].Name)
	return d.cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, s.Live[0].Name, metav1.DeleteOptions{})
}

// watch prints the table whenever it changes (at most every 200 ms) until every
// replica lists exactly the others, or timeout.
func (d *demo) watch(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		s, err := peerview.Read(ctx, d.cluster.Clientset, ns, "epp", selector)
		if err != nil {
			return err
		}
		views := d.rt.Views(ctx, s.Live)
		table := peerview.Table(s, views)
		if table != last {
			fmt.Printf("   [%s] %d desired, %d live, %d starting, %d terminating\n%s", time.Now().Format("15:04:05.000"), s.Desired, len(s.Live), s.Others, s.Terminating, table)
			last = table
		}
		if s.Settled() && peerview.Diff(s.Expected(9005), views) == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not converged after %s: %s", timeout, peerview.Diff(s.Expected(9005), views))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// prefixWriter indents the control plane's progress lines.
type prefixWriter struct{}

func (prefixWriter) Write(p []byte) (int, error) {
	fmt.Print("   " + string(p))
	return len(p), nil
}
