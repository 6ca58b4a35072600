package emulator

import (
	"fmt"
	"math"
	"time"
)

// Limits are the emulator's model of MAX's rate limit: at most 30 requests
// per second per bot on the platform API. MAX publishes the rate but not how
// it counts; the emulator enforces it exactly, as a token bucket in GCRA
// form (generic cell rate algorithm) with all arithmetic in integer
// nanoseconds of the emulator's clock, so that it can measure a sender.
//
// Every authorised API request (POST /messages and GET /me) takes a token.
// A refused request gets 429 with a Retry-After header of ceil(seconds
// until the bucket admits one again), and the bot is then in an announced
// pause that ends exactly that many seconds later. Every request inside the
// pause is refused with the time that is left (MAX documents no punishment
// for requests inside a pause, so there is none) and counted
// (Stats.InPause).
type Limits struct {
	// Enabled turns the bucket on. Pauses opened with OpenPause apply even
	// when it is false.
	Enabled bool
	// Rate is the limit in requests per second (default 30).
	Rate float64
	// Burst is how many requests the bucket admits at once (default 30: a
	// second's worth).
	Burst int
}

// Default rates.
const (
	// DefaultRate is MAX's documented limit, requests per second per bot.
	DefaultRate = 30
	// DefaultBurst is the bucket's depth: one second of the rate.
	DefaultBurst = 30
)

// DefaultLimits returns MAX's limit, enabled.
func DefaultLimits() Limits { return Limits{Enabled: true, Rate: DefaultRate, Burst: DefaultBurst} }

// withDefaults fills zero fields and validates the rest.
func (l Limits) withDefaults() (Limits, error) {
	switch {
	case l.Rate == 0:
		l.Rate = DefaultRate
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate > 1e9:
		return l, fmt.Errorf("invalid Limits.Rate %v: must be a positive number of requests per second", l.Rate)
	}
	switch {
	case l.Burst == 0:
		l.Burst = DefaultBurst
	case l.Burst < 0:
		return l, fmt.Errorf("invalid Limits.Burst %d: must be positive", l.Burst)
	}
	return l, nil
}

// rule is the bucket's parameters in GCRA form: the emission interval
// (1/rate) and the tolerance ((burst-1) intervals), in nanoseconds.
type rule struct {
	interval  int64
	tolerance int64
}

func newRule(perSecond float64, burst int) rule {
	interval := max(int64(math.Round(float64(time.Second)/perSecond)), 1)
	return rule{interval: interval, tolerance: interval * int64(burst-1)}
}

// wait returns how long after now the bucket whose theoretical arrival time
// is tat admits one request; 0 means it admits one now.
func (r rule) wait(tat, now int64) int64 { return max(max(tat, now)-r.tolerance-now, 0) }

// take returns the theoretical arrival time after admitting one request.
func (r rule) take(tat, now int64) int64 { return max(tat, now) + r.interval }

// SenderReactionTime is how long after a 429 has been written to its
// connection the emulator counts a request as sent by a sender that could
// have known of the pause (Stats.SentInPause). A sender with several
// requests in flight reads the 429 on one of them while another may be
// leaving at that very moment; anything later than this is a sender that
// knew and sent anyway.
const SenderReactionTime = 5 * time.Millisecond

// knownPause is a pause whose 429 has been written: a request arriving in
// [from, until) was sent by a sender that could have known of it. opener
// is the request the 429 answered.
type knownPause struct {
	from, until int64
	opener      PauseOpener
}

// verdict is the limiter's answer to one request.
type verdict struct {
	ok         bool
	retryAfter int64 // seconds, when !ok
	until      int64 // end of the pause the 429 announces, when !ok
	inPause    bool  // the request came inside an announced pause
}

// limiter holds the bucket and the pause. It is not safe for concurrent
// use; the Emulator serialises calls under its mutex.
type limiter struct {
	cfg        Limits
	rule       rule
	tat        int64 // GCRA theoretical arrival time
	pauseUntil int64 // end of the announced pause; none when <= now
	pending    int64 // retry_after (s) of a pause opened by OpenPause, announced by the next request
	known      []knownPause
}

func newLimiter(cfg Limits) *limiter {
	return &limiter{cfg: cfg, rule: newRule(cfg.Rate, cfg.Burst)}
}

// ceilSeconds rounds a positive duration in nanoseconds up to whole
// seconds, at least 1: Retry-After is an integer.
func ceilSeconds(ns int64) int64 {
	return max((ns+int64(time.Second)-1)/int64(time.Second), 1)
}

// pausedAt reports whether an announced pause is in force at now.
func (l *limiter) pausedAt(now int64) bool { return now < l.pauseUntil }

// knownAt reports whether a pause that its sender could have read by now is
// in force at now, how much of it is left, and the requests whose 429s
// announced the pauses in force.
func (l *limiter) knownAt(now int64) (bool, time.Duration, []PauseOpener) {
	live := l.known[:0]
	var (
		left    int64
		openers []PauseOpener
	)
	for _, k := range l.known {
		if k.until <= now {
			continue
		}
		live = append(live, k)
		if k.from <= now {
			left = max(left, k.until-now)
			openers = append(openers, k.opener)
		}
	}
	clear(l.known[len(live):])
	l.known = live
	return left > 0, time.Duration(left), openers
}

// answered records that the 429 announcing a pause that ends at until was
// written at now to the connection of the request opener.
func (l *limiter) answered(now, until int64, opener PauseOpener) {
	if until > now {
		l.known = append(l.known, knownPause{from: now + int64(SenderReactionTime), until: until, opener: opener})
	}
}

// admit decides one request at now:
//
//  1. A request inside an announced pause is refused with the seconds that
//     are left, rounded up.
//  2. A pause opened by OpenPause and not yet announced is announced now:
//     the request gets 429 with its retry_after, and the pause runs from
//     now.
//  3. With Enabled, the request must fit the bucket; if it does not, it
//     gets 429 with retry_after = ceil(seconds until the bucket admits
//     one), at least 1, and the pause runs exactly that long from now. A
//     request exactly at the end of a pause is admitted.
func (l *limiter) admit(now int64) verdict {
	if l.pauseUntil > now {
		return verdict{retryAfter: ceilSeconds(l.pauseUntil - now), until: l.pauseUntil, inPause: true}
	}
	if l.pending > 0 {
		ra := l.pending
		l.pending = 0
		return l.announce(now, ra)
	}
	if !l.cfg.Enabled {
		return verdict{ok: true}
	}
	if w := l.rule.wait(l.tat, now); w > 0 {
		return l.announce(now, ceilSeconds(w))
	}
	l.tat = l.rule.take(l.tat, now)
	return verdict{ok: true}
}

// announce starts an announced pause of ra seconds from now.
func (l *limiter) announce(now, ra int64) verdict {
	l.pauseUntil = now + ra*int64(time.Second)
	return verdict{retryAfter: ra, until: l.pauseUntil}
}

// open registers a pause to be announced by the next request.
func (l *limiter) open(retryAfter int64) error {
	if retryAfter <= 0 {
		return fmt.Errorf("retry_after must be a positive number of seconds, got %d", retryAfter)
	}
	l.pending = retryAfter
	return nil
}
