package emulator

import (
	"fmt"
	"math"
	"time"
)

// Limits are the emulator's model of Twilio's limits.
//
// Twilio documents two (docs/CHANNELS.md (SMS)): the REST API answers 429
// with error 20429 when an account has too many concurrent requests
// (MaxConcurrent), and each sender releases message segments to the
// carriers at its own rate (1 segment a second for a US or Canadian long
// code, 3 for a toll-free number, 10 for other international senders, 100
// for a short code), queueing what comes faster for up to 10 hours and
// refusing more with 400 / 21611. The emulator adds a request rate
// (RequestRate, RequestBurst) refused with 429 / 20429 too, so that a test
// can provoke a 429 without a hundred concurrent requests. Every 429 it
// sends carries a Retry-After header (whole seconds), unless NoRetryAfter
// is set: Twilio documents no such header.
type Limits struct {
	// Enabled turns the limits on. A pause opened with OpenPause applies
	// even when it is false.
	Enabled bool
	// MaxConcurrent is how many API requests may be in progress at once
	// (default 100); one more gets 429 / 20429 at once.
	MaxConcurrent int
	// RequestRate is the API requests accepted per second (default 100);
	// RequestBurst how many at once (default 100).
	RequestRate  float64
	RequestBurst int
	// SegmentsPerSecond is the rate at which each sender's queue releases
	// segments (default 1: a long code).
	SegmentsPerSecond float64
	// QueueWindow is how much a sender's queue may hold, as time to drain
	// it (default 10h); a message beyond it gets 400 / 21611.
	QueueWindow time.Duration
	// NoRetryAfter leaves the Retry-After header out of 429 answers.
	NoRetryAfter bool
}

// DefaultLimits returns Twilio's documented limits for a long code,
// enabled.
func DefaultLimits() Limits {
	return Limits{
		Enabled:           true,
		MaxConcurrent:     100,
		RequestRate:       100,
		RequestBurst:      100,
		SegmentsPerSecond: 1,
		QueueWindow:       10 * time.Hour,
	}
}

// withDefaults fills zero fields with DefaultLimits and validates the rest.
func (l Limits) withDefaults() (Limits, error) {
	d := DefaultLimits()
	rate := func(v *float64, def float64, name string) error {
		switch {
		case *v == 0:
			*v = def
		case !(*v > 0) || math.IsInf(*v, 0) || *v > 1e9:
			return fmt.Errorf("invalid Limits.%s %v: must be positive", name, *v)
		}
		return nil
	}
	count := func(v *int, def int, name string) error {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			return fmt.Errorf("invalid Limits.%s %d: must be positive", name, *v)
		}
		return nil
	}
	for _, err := range []error{
		count(&l.MaxConcurrent, d.MaxConcurrent, "MaxConcurrent"),
		rate(&l.RequestRate, d.RequestRate, "RequestRate"),
		count(&l.RequestBurst, d.RequestBurst, "RequestBurst"),
		rate(&l.SegmentsPerSecond, d.SegmentsPerSecond, "SegmentsPerSecond"),
	} {
		if err != nil {
			return l, err
		}
	}
	switch {
	case l.QueueWindow == 0:
		l.QueueWindow = d.QueueWindow
	case l.QueueWindow < 0:
		return l, fmt.Errorf("invalid Limits.QueueWindow %s: must be positive", l.QueueWindow)
	}
	return l, nil
}

// SenderReactionTime is how long after a 429 has been written to its
// connection the emulator counts a request as sent inside the pause it
// announced (Stats.InPause): a sender with requests in flight may have one
// leaving at the very moment it reads the 429.
const SenderReactionTime = 5 * time.Millisecond

// limiter holds the request bucket, the pause and the sender queues. It is
// not safe for concurrent use; the Emulator serialises calls under its
// mutex.
type limiter struct {
	cfg       Limits
	interval  time.Duration // GCRA emission interval: 1/RequestRate
	tolerance time.Duration // (RequestBurst-1) intervals
	tat       time.Time     // GCRA theoretical arrival time
	// pending is a pause opened by OpenPause that the next request
	// announces.
	pending time.Duration
	// pauseUntil ends the announced pause; knownFrom is when its sender
	// could have read the 429 that announced it (zero until written), and
	// opener is the request that 429 answered.
	pauseUntil, knownFrom time.Time
	opener                PauseOpener
	// queues maps a sender to when its queue will be empty.
	queues map[string]time.Time
}

func newLimiter(cfg Limits) *limiter {
	interval := max(time.Duration(float64(time.Second)/cfg.RequestRate), 1)
	return &limiter{
		cfg:       cfg,
		interval:  interval,
		tolerance: interval * time.Duration(cfg.RequestBurst-1),
		queues:    make(map[string]time.Time),
	}
}

// verdict is the limiter's answer to one request.
type verdict struct {
	ok         bool
	retryAfter time.Duration // whole seconds, when !ok
	reason     string        // "pause" or "rate", when !ok
	announces  bool          // the 429 announces a pause
}

// ceilSecond rounds a positive duration up to whole seconds, at least 1.
func ceilSecond(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}

// admit decides one API request at now: inside an announced pause it is
// refused with what is left of it; a pending pause is announced by it;
// with Enabled, the request bucket must admit it.
func (l *limiter) admit(now time.Time) verdict {
	if now.Before(l.pauseUntil) {
		return verdict{retryAfter: ceilSecond(l.pauseUntil.Sub(now)), reason: "pause"}
	}
	if l.pending > 0 {
		ra := l.pending
		l.pending = 0
		l.pauseUntil, l.knownFrom = now.Add(ra), time.Time{}
		return verdict{retryAfter: ra, reason: "pause", announces: true}
	}
	if !l.cfg.Enabled {
		return verdict{ok: true}
	}
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) - l.tolerance; wait > 0 {
		return verdict{retryAfter: ceilSecond(wait), reason: "rate"}
	}
	l.tat = tat.Add(l.interval)
	return verdict{ok: true}
}

// answered records that the 429 announcing the pause was written at now
// to the connection of the request opener.
func (l *limiter) answered(now time.Time, opener PauseOpener) {
	if l.knownFrom.IsZero() && now.Before(l.pauseUntil) {
		l.knownFrom, l.opener = now.Add(SenderReactionTime), opener
	}
}

// knownPause reports whether a request arriving at now was sent inside a
// pause its sender could have known of, how much of it is left, and the
// request whose 429 announced it.
func (l *limiter) knownPause(now time.Time) (bool, time.Duration, PauseOpener) {
	if l.knownFrom.IsZero() || now.Before(l.knownFrom) || !now.Before(l.pauseUntil) {
		return false, 0, PauseOpener{}
	}
	return true, l.pauseUntil.Sub(now), l.opener
}

// enqueue puts a message of segments on sender's queue and returns when
// the queue releases it; ok is false when the queue already holds more
// than QueueWindow. Without Enabled, every message leaves at once.
func (l *limiter) enqueue(sender string, segments int, now time.Time) (at time.Time, ok bool) {
	if !l.cfg.Enabled {
		return now, true
	}
	start := l.queues[sender]
	if start.Before(now) {
		start = now
	}
	if start.Sub(now) > l.cfg.QueueWindow {
		return time.Time{}, false
	}
	l.queues[sender] = start.Add(time.Duration(float64(max(segments, 1)) / l.cfg.SegmentsPerSecond * float64(time.Second)))
	return start, true
}

// backlog returns the longest time any sender's queue needs to drain.
func (l *limiter) backlog(now time.Time) time.Duration {
	var b time.Duration
	for s, until := range l.queues {
		if d := until.Sub(now); d > b {
			b = d
		} else if d <= 0 {
			delete(l.queues, s)
		}
	}
	return b
}
