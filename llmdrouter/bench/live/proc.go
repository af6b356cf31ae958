package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/capture"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/cputime"
	"github.com/epp-peer-discovery/epp-peer-discovery/internal/testsupport/procmem"
)

// proc is one running implementation: epp or the reference.
type proc struct {
	impl      string
	cmd       *exec.Cmd
	peersURL  string
	readyURL  string
	started   time.Time
	out       *capture.Buffer
	done      chan error
	client    *http.Client
	buf       bytes.Buffer
	exitErr   error
	exitKnown bool
}

// start runs one implementation as a replica in namespace ns and waits until it
// answers /readyz with 200; started is when the process was launched.
func (b *bench) start(impl, ns string) (*proc, error) {
	peersAddr, probeAddr := freeAddr(), freeAddr()
	var cmd *exec.Cmd
	switch impl {
	case implEpp:
		cmd = exec.Command(b.eppBin, append([]string{"--enable-peer-discovery", "--epp-peer-service=epp", "--kubeconfig=" + b.env.Kubeconfig,
			"--metrics-bind-address=" + peersAddr, "--health-probe-bind-address=" + probeAddr}, b.eppFlags...)...)
		cmd.Env = []string{"NAMESPACE=" + ns, "POD_NAME=bench-self", "HOME=" + os.TempDir()}
	case implReference:
		probeAddr = peersAddr
		cmd = exec.Command(b.refBin, "--kubeconfig="+b.env.Kubeconfig, "--namespace="+ns, "--service=epp", "--addr="+peersAddr)
		cmd.Env = []string{"HOME=" + os.TempDir()}
	case implLLMD:
		// Upstream's standalone mode (no InferencePool), its ports on 127.0.0.1's
		// free ports, the plugin serving /debug/peers; ready once that says synced.
		port := func() string { a := freeAddr(); return a[strings.LastIndex(a, ":")+1:] }
		config := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n" +
			"- name: peers\n  type: endpointslice-peer-discovery\n  parameters: {service: epp, debugAddress: \"" + peersAddr + "\"}\n" +
			"schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\ndataLayer:\n  peerDiscovery:\n    pluginRef: peers\n"
		probeAddr = ""
		cmd = exec.Command(b.llmdBin, "--endpoint-selector=app=bench-model-server", "--endpoint-target-ports=8000", "--pool-namespace="+ns,
			"--grpc-port="+port(), "--grpc-health-port="+port(), "--metrics-port="+port(), "--metrics-endpoint-auth=false",
			"--drain-timeout=0s", "--zap-log-level=error", "--config-text="+config)
		cmd.Env = []string{"NAMESPACE=" + ns, "POD_NAME=bench-7d9f8c6b5-self", "KUBECONFIG=" + b.env.Kubeconfig, "HOME=" + os.TempDir()}
	default:
		return nil, fmt.Errorf("unknown implementation %q", impl)
	}
	p := &proc{impl: impl, cmd: cmd, peersURL: "http://" + peersAddr + "/debug/peers", readyURL: "http://" + probeAddr + "/readyz",
		out: &capture.Buffer{}, done: make(chan error, 1),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2}}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", impl, err)
	}
	go func() { p.done <- cmd.Wait() }()
	deadline := p.started.Add(60 * time.Second)
	for {
		if p.ready() {
			return p, nil
		}
		select {
		case err := <-p.done:
			p.exitErr, p.exitKnown = err, true
			return nil, fmt.Errorf("%s exited before it was ready (%w); output:\n%s", impl, err, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s not ready within 60s; output:\n%s", impl, p.out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ready reports whether the process is ready: /readyz answers 200, or for
// llm-d-router's EPP (whose readiness is its gRPC health, not about peers) the
// plugin's /debug/peers says synced.
func (p *proc) ready() bool {
	if p.impl == implLLMD {
		body, err := p.peers()
		return err == nil && bytes.Contains(body, []byte(`"synced": true`))
	}
	resp, err := p.client.Get(p.readyURL)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop sends SIGTERM and waits (killing it after 10 s).
func (p *proc) stop() {
	if p.exitKnown {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case p.exitErr = <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		p.exitErr = <-p.done
	}
	p.exitKnown = true
	p.client.CloseIdleConnections()
}

// peers returns the body of one GET /debug/peers, valid until the next call.
func (p *proc) peers() ([]byte, error) {
	resp, err := p.client.Get(p.peersURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// One buffer, grown once, for both implementations: reading costs the same.
	p.buf.Reset()
	if _, err := p.buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	body := p.buf.Bytes()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", p.peersURL, resp.StatusCode)
	}
	return body, nil
}

// errTimeout is returned by waitFor when the change was not seen in time.
var errTimeout = errors.New("not seen in time")

// waitFor polls /debug/peers every pollEvery until marker is present (or absent),
// and returns when the response that showed it was received.
func (p *proc) waitFor(marker []byte, present bool, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		start := time.Now()
		body, err := p.peers()
		if err == nil && bytes.Contains(body, marker) == present {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return time.Time{}, err
			}
			return time.Time{}, errTimeout
		}
		if d := pollEvery - time.Since(start); d > 0 {
			time.Sleep(d)
		}
	}
}

// cpu is the process's CPU time so far.
func (p *proc) cpu() (time.Duration, error) { return cputime.Of(p.cmd.Process.Pid) }

// rss is the process's resident set size in bytes (VmRSS).
func (p *proc) rss() (int64, error) {
	u, err := procmem.Of(p.cmd.Process.Pid)
	return u.RSS, err
}
