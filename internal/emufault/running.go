package emufault

import (
	"log/slog"
	"math/rand/v2"
	"time"
)

// Running is an emulator's running outage, if any. It is not safe for
// concurrent use: the emulator calls it under its own lock, with the time
// of its own clock.
type Running struct {
	log     *slog.Logger
	cur     *Outage
	until   time.Time     // the outage's end; zero for none
	release chan struct{} // closed when it ends, to free blackholed requests
}

// NewRunning returns a Running with no outage. It logs to log when an
// outage ends because its duration has passed; starting and stopping one
// are the emulator's to log.
func NewRunning(log *slog.Logger) *Running {
	return &Running{log: log}
}

// Start starts o at now, replacing any running outage. o must have passed
// [Kind.WithDefaults].
func (r *Running) Start(o Outage, now time.Time) {
	r.Stop()
	r.cur, r.release, r.until = &o, make(chan struct{}), time.Time{}
	if o.Duration > 0 {
		r.until = now.Add(o.Duration)
	}
}

// Stop ends the running outage, if any, and releases the requests it
// holds. It returns the outage it ended, or nil.
func (r *Running) Stop() *Outage {
	o := r.cur
	if o != nil {
		close(r.release)
		r.cur, r.release = nil, nil
	}
	return o
}

// Current returns the outage running at now, or nil.
func (r *Running) Current(now time.Time) *Outage {
	r.expire(now)
	if r.cur == nil {
		return nil
	}
	o := *r.cur
	return &o
}

// Fault is the fault chosen for one request.
type Fault struct {
	// Mode is the fault.
	Mode Mode
	// Status is the HTTP status of a 5xx mode.
	Status int
	// Delay is the extra latency of ModeSlow.
	Delay time.Duration
	// Release is closed when the outage ends: a blackholed request waits
	// for it.
	Release <-chan struct{}
}

// Pick decides whether the outage running at now hits a request, drawing
// from rng for an outage with a probability below 1.
func (r *Running) Pick(now time.Time, rng *rand.Rand) (Fault, bool) {
	r.expire(now)
	o := r.cur
	if o == nil || (o.Probability < 1 && rng.Float64() >= o.Probability) {
		return Fault{}, false
	}
	return Fault{Mode: o.Mode, Status: o.Status, Delay: o.Delay, Release: r.release}, true
}

// expire ends the outage if its duration has passed at now.
func (r *Running) expire(now time.Time) {
	if r.cur != nil && !r.until.IsZero() && !now.Before(r.until) {
		r.log.Info("outage ended", "mode", string(r.cur.Mode))
		r.Stop()
	}
}
