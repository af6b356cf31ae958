package modelsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Fleet is M servers in one process on one Clock, each on its own listener.
type Fleet struct {
	Clock   *Clock
	Servers []*Server
	Addrs   []string // host:port of each server

	stopped chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	https   []*http.Server

	mu        sync.Mutex
	balance   Balance
	sampleDur time.Duration
}

// Balance is how evenly the running requests spread over the servers, and how
// loaded the servers are, integrated over time by sampling: the sums over the
// samples of the most any server ran, of the mean over the servers, of the mean
// KV cache usage (0 to 1), the samples in which some server had a request
// waiting, and the number of samples.
type Balance struct {
	SumMax, SumMean float64
	SumUsage        float64
	Waiting         int
	Samples         int
}

// Usage is the servers' mean KV cache usage over the samples (0 to 1).
func (b Balance) Usage() float64 {
	if b.Samples == 0 {
		return 0
	}
	return b.SumUsage / float64(b.Samples)
}

// WaitingShare is the share of the samples in which some server had a request
// waiting (its KV cache or its batch full): how often the servers were saturated.
func (b Balance) WaitingShare() float64 {
	if b.Samples == 0 {
		return 0
	}
	return float64(b.Waiting) / float64(b.Samples)
}

// Imbalance is the time-weighted max/mean of running requests across the servers:
// the time integral of the largest server's count over that of the mean (1: even).
// 0 when nothing ran.
func (b Balance) Imbalance() float64 {
	if b.SumMean == 0 {
		return 0
	}
	return b.SumMax / b.SumMean
}

// StartFleet starts len(listeners) servers of cfg on clock, server i serving on
// listeners[i] (the fleet closes them), and samples their running requests every
// sample of wall time until Stop.
func StartFleet(cfg Config, clock *Clock, listeners []net.Listener, sample time.Duration) (*Fleet, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fleet{Clock: clock, stopped: make(chan struct{}), cancel: cancel, sampleDur: sample}
	for i, l := range listeners {
		s, err := NewServer(cfg, clock)
		if err != nil {
			cancel()
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, err
		}
		f.Servers = append(f.Servers, s)
		f.Addrs = append(f.Addrs, l.Addr().String())
		hs := &http.Server{Handler: s.Handler(fmt.Sprintf("server-%d", i), f.stopped), ReadHeaderTimeout: 10 * time.Second}
		f.https = append(f.https, hs)
		f.wg.Add(2)
		go func() { defer f.wg.Done(); s.Run(ctx) }()
		go func() { defer f.wg.Done(); _ = hs.Serve(l) }()
	}
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.sample(ctx) }()
	return f, nil
}

// Listen opens n TCP listeners on host, from port upward (port 0: any free ports).
func Listen(host string, port, n int) ([]net.Listener, error) {
	var out []net.Listener
	for i := range n {
		p := 0
		if port != 0 {
			p = port + i
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(p)))
		if err != nil {
			for _, l := range out {
				_ = l.Close()
			}
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func (f *Fleet) sample(ctx context.Context) {
	t := time.NewTicker(f.sampleDur)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		most, sum, usage, waiting := 0, 0, 0.0, false
		for _, s := range f.Servers {
			st := s.State()
			most = max(most, st.Running)
			sum += st.Running
			usage += st.Usage
			waiting = waiting || st.Waiting > 0
		}
		f.mu.Lock()
		f.balance.SumMax += float64(most)
		f.balance.SumMean += float64(sum) / float64(len(f.Servers))
		f.balance.SumUsage += usage / float64(len(f.Servers))
		if waiting {
			f.balance.Waiting++
		}
		f.balance.Samples++
		f.mu.Unlock()
	}
}

// TakeBalance returns the balance sampled since the last call, and starts anew.
func (f *Fleet) TakeBalance() Balance {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.balance
	f.balance = Balance{}
	return b
}

// Stats is the sum of every server's counters.
func (f *Fleet) Stats() Stats {
	var sum Stats
	for _, s := range f.Servers {
		st := s.Stats()
		sum.Requests += st.Requests
		sum.Aborted += st.Aborted
		sum.PromptTokens += st.PromptTokens
		sum.CachedTokens += st.CachedTokens
		sum.OutputTokens += st.OutputTokens
		sum.Steps += st.Steps
		sum.Late += st.Late
	}
	return sum
}

// Idle reports whether no server runs or holds a request.
func (f *Fleet) Idle() bool {
	for _, s := range f.Servers {
		if st := s.State(); st.Running+st.Waiting > 0 {
			return false
		}
	}
	return true
}

// Stop ends every request in flight, stops the servers and waits for them.
func (f *Fleet) Stop() error {
	close(f.stopped)
	f.cancel()
	var errs []error
	for _, hs := range f.https {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	f.wg.Wait()
	return errors.Join(errs...)
}
