package delivery

import (
	"time"

	"golang.org/x/time/rate"
)

// The channel-wide send limit (Telegram: about 30 messages a second per
// bot, up to 1000 with paid broadcast) is two rules, both checked when the
// dispatcher launches a send (botLimiter):
//
//   - a token bucket at the rate r holding botCatchUp (half a second) of
//     tokens, which spaces the sends at the rate while a backlog waits, and
//     lets the sends that a stall (a slow JetStream round trip, a busy
//     machine, the publisher behind for a moment) kept from going out go
//     as soon as it ends: over any span the sends stay within the rate and
//     the bucket's half second;
//   - a window: at most r × botWindow × (1 + botPeak) sends due in any
//     botWindow (one second), so that what the bucket lets through after
//     a stall comes out at no more than a quarter above the rate in any
//     second (with strict, at most r × botWindow: never above the rate).
//
// A bucket alone cannot do both. One holding only the tokens of a
// dispatcher's lateness (10 ms, as it did until 2026-12-06) lost every
// stall longer than that from the rate for good: a worker sending at
// exactly the rate the notifications came in (a paid broadcast at 1000 a
// second) never caught up, and each stall added its length to the delay
// of every later notification (benchmark row 8b: the second with 721 sends
// left every later order 0.3 s later, to the end of the run). A bucket
// holding half a second alone would allow 1.5 times the rate in the
// second after an idle moment.
//
// Nor can a window that holds exactly the rate (strict, the default until
// 2026-12-07), whatever the bucket: while notifications come at the rate,
// no second can hold more sends than arrive in it, so the backlog at any
// instant is at least what it was a second before. The sends a stall held
// back go at once, and a second later the window is full at the same point
// and holds back as many again: the stall's delay comes back every second
// for as long as the rate lasts (benchmark row 8b, a worker's stored →
// sent p50 137–364 ms at 1000/s; TestBotLimitCatchesUpWithArrivalsAtTheRate).
// With a quarter of room the repeat shrinks by a quarter of a second each
// second, and a stall of up to half a second is made good within two.
//
// The window keeps the instants of the last sends it counts, so it applies
// up to maxWindowSends a window. Above that (limits set far above any
// provider's, as the worker ceiling benchmark does) the bucket alone holds
// the rate, with the tokens of botLateness.

// botWindow is the span in which the window counts sends.
const botWindow = time.Second

// botCatchUp is the tokens the bucket holds, in time at the rate: the
// longest stall that is made good. Half a second leaves half a second of
// the rate between what the worker's sends may reach over any span,
// r × (T + 0.5 s), and what a provider modelled as a bucket holding a
// second of the rate admits, r × (T + 1 s), for the requests that reach it
// sooner than they were due. A bucket of a whole second made good longer
// stalls but left no such margin: the emulator answered 429 in eight of
// nine runs of benchmark row 8, against none in eighteen with half a
// second (BENCHMARKS.md, section 8).
const botCatchUp = 500 * time.Millisecond

// botPeak is how far above the rate the window lets a second's sends go,
// unless strict: the room in which the sends a stall held back are made
// good while notifications keep coming at the rate. Telegram states its
// limits only approximately ("about 30 messages per second", "up to 1000"),
// and the benchmark's emulator, like the MAX one, enforces a bucket holding
// a whole second of its rate, which admits twice the rate in a second.
const botPeak = 0.25

// maxWindowSends bounds the sends a window keeps the instants of.
const maxWindowSends = 4096

// botLateness is how late a dispatcher may launch a send without the rate
// losing the lateness when there is no window (above maxWindowSends).
const botLateness = 10 * time.Millisecond

// botLimiter is the channel-wide limit: the bucket and the window.
type botLimiter struct {
	bucket *rate.Limiter
	// n is the sends any window may hold; 0: no window.
	n int
	// strict makes the window hold the rate's sends, no more (botPeak).
	strict bool
	// sent holds the instants of the sends reserved, oldest first, at
	// least the last n of them (older ones are dropped in bulk).
	sent []time.Time
	// quiet is the end of the last pause the bucket was emptied for.
	quiet time.Time
}

// botReservation is one send's place in the limit.
type botReservation struct {
	l   *botLimiter
	res *rate.Reservation
	at  time.Time // when the send may go
}

// newBotLimiter returns the channel-wide limit for the send rate r; strict
// keeps every second's sends at the rate (botPeak).
func newBotLimiter(r rate.Limit, strict bool) *botLimiter {
	return &botLimiter{bucket: rate.NewLimiter(r, botBurst(r)), n: windowSends(r, strict), strict: strict}
}

// windowSends returns how many sends a window holds at the rate r: those
// of the rate, and botPeak more unless strict; 0 when the window does not
// apply (no rate, or above maxWindowSends).
func windowSends(r rate.Limit, strict bool) int {
	if r == rate.Inf || r <= 0 {
		return 0
	}
	perWindow := float64(r) * botWindow.Seconds()
	if perWindow > maxWindowSends {
		return 0
	}
	if !strict {
		perWindow *= 1 + botPeak
	}
	return max(1, int(perWindow))
}

// botBurst returns the tokens the bucket holds at the send rate r: those
// of botCatchUp where the window applies, else those of botLateness; at
// least one.
func botBurst(r rate.Limit) int {
	if r == rate.Inf || r <= 0 {
		return 1
	}
	hold := botLateness
	if windowSends(r, true) > 0 {
		hold = botCatchUp
	}
	return max(1, int(float64(r)*hold.Seconds()))
}

// reserve takes the next send's place: the later of the bucket's token
// and the window's room, never before the send reserved last.
//
// The first send after a whole window without any (a start, an idle
// moment, a long pause) takes every token the bucket holds: what begins
// then is not a stall to make good, and sent at once those tokens would
// come back as a bunch at the start of every second for as long as the
// backlog lasted (the window makes room for them together). The sends
// after it go at the rate.
func (l *botLimiter) reserve(now time.Time) *botReservation {
	take := 1
	if l.n > 0 && (len(l.sent) == 0 || !l.sent[len(l.sent)-1].After(now.Add(-botWindow))) {
		take = max(1, int(l.bucket.TokensAt(now)))
	}
	res := l.bucket.ReserveN(now, take)
	at := now.Add(res.DelayFrom(now))
	if l.n > 0 {
		k := len(l.sent)
		if k > 0 && at.Before(l.sent[k-1]) {
			at = l.sent[k-1]
		}
		if k >= l.n {
			// The window ending at the send holds the n sends before it
			// only if the oldest of them is at least botWindow earlier.
			if room := l.sent[k-l.n].Add(botWindow); at.Before(room) {
				at = room
			}
		}
		if k >= 2*l.n {
			l.sent = append(l.sent[:0], l.sent[k-l.n+1:]...)
		}
		l.sent = append(l.sent, at)
	}
	return &botReservation{l: l, res: res, at: at}
}

// quietUntil makes the sends after a pause (a 429's retry_after) start at
// the rate: the bucket is emptied at until, so that what the pause held
// back does not go as a catch-up. A 429 asks for fewer requests, not the
// same number later; the tokens a stall leaves are for stalls.
func (l *botLimiter) quietUntil(until time.Time) {
	if !until.After(l.quiet) {
		return
	}
	l.quiet = until
	l.bucket.ReserveN(until, l.bucket.Burst())
}

// setRate changes the rate from now on (graceful degradation): the bucket's
// rate and tokens, and the window's sends.
func (l *botLimiter) setRate(r rate.Limit, now time.Time) {
	l.bucket.SetLimitAt(now, r)
	l.bucket.SetBurstAt(now, botBurst(r))
	l.n = windowSends(r, l.strict)
	if l.n == 0 {
		l.sent = nil
	} else if k := len(l.sent); k > l.n {
		l.sent = append(l.sent[:0], l.sent[k-l.n:]...)
	}
}

// DelayFrom returns how long from now the send must wait.
func (r *botReservation) DelayFrom(now time.Time) time.Duration {
	return max(0, r.at.Sub(now))
}

// CancelAt gives the place back: no request was made. The bucket gets its
// token back as far as later reservations allow, and the window forgets
// the send.
func (r *botReservation) CancelAt(now time.Time) {
	r.res.CancelAt(now)
	sent := r.l.sent
	for i := len(sent) - 1; i >= 0; i-- {
		if sent[i].Equal(r.at) {
			r.l.sent = append(sent[:i], sent[i+1:]...)
			return
		}
		if sent[i].Before(r.at) {
			return
		}
	}
}
