package modelsim

import (
	"context"
	"time"
)

// Clock is simulated time: it starts at 0 and runs Speedup times faster than the
// wall clock.
type Clock struct {
	start   time.Time
	speedup float64
}

// NewClock starts a clock at 0 now; speedup must be positive.
func NewClock(speedup float64) *Clock {
	if speedup <= 0 {
		panic("modelsim: a clock's speed-up must be positive")
	}
	return &Clock{start: time.Now(), speedup: speedup}
}

// Speedup is how many simulated seconds pass in a wall-clock second.
func (c *Clock) Speedup() float64 { return c.speedup }

// Now is the simulated time.
func (c *Clock) Now() time.Duration {
	return time.Duration(float64(time.Since(c.start)) * c.speedup)
}

// Wall is how long d of simulated time takes on the wall clock.
func (c *Clock) Wall(d time.Duration) time.Duration { return time.Duration(float64(d) / c.speedup) }

// SleepUntil waits until the simulated time is t, or ctx ends (false).
func (c *Clock) SleepUntil(ctx context.Context, t time.Duration) bool {
	wait := time.Until(c.start.Add(c.Wall(t)))
	if wait <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Sleep waits d of simulated time, or until ctx ends (false).
func (c *Clock) Sleep(ctx context.Context, d time.Duration) bool {
	return c.SleepUntil(ctx, c.Now()+d)
}
