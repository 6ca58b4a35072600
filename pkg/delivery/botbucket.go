package delivery

import (
	"time"

	"golang.org/x/time/rate"
)

// botLateness is how late the dispatcher may launch a send without the
// channel-wide rate losing the lateness.
const botLateness = 10 * time.Millisecond

// newBotBucket returns the channel-wide token bucket for the send rate r
// (botBurst).
func newBotBucket(r rate.Limit) *rate.Limiter {
	return rate.NewLimiter(r, botBurst(r))
}

// botBurst returns the burst of the channel-wide bucket at the send rate r:
// the tokens of botLateness, at least one.
//
// A bucket of one token loses from the rate every launch that comes more
// than one interval after its token became due: the token that accrued
// meanwhile does not fit. At 1000 msg/s (paid broadcast) an interval is one
// millisecond, and a dispatcher on a busy machine is often that late: a
// loop that only takes tokens and sleeps until the next one reached 930–943
// msg/s of 1000 with three busy loops beside it on two cores. With the
// tokens of 10 ms a launch up to 10 ms late loses nothing. (The end-to-end
// benchmark at the paid-broadcast rate, row 8, did not change with it on
// the two-core machine: JetStream's round trips bound it there.)
//
// The price is the burst: a window of T seconds holds at most r×T + burst
// sends, against r×T + 1 with one token, and only after an idle moment (a
// backlog keeps the bucket empty). At 1000 msg/s that is 1,010 in the worst
// second (Telegram's paid broadcast is "up to 1000 messages per second");
// below 200 msg/s the bucket is the single token it was, Telegram's 30
// msg/s among them.
func botBurst(r rate.Limit) int {
	if r == rate.Inf || r <= 0 {
		return 1
	}
	return max(1, int(float64(r)*botLateness.Seconds()))
}
