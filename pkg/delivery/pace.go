package delivery

import (
	"context"

	"golang.org/x/time/rate"
)

// pacer spaces the requests a worker writes to its provider. The dispatcher
// takes a token of the channel's rate when it starts an attempt, but an
// attempt reads its record and writes its send claim before the request
// leaves, and those can take seconds while JetStream elects a leader. Sends
// held up together are released together: in the chaos cluster run, 16
// claims came back as one batch, the 16 requests left within a millisecond,
// and 3 of them reached Telegram 7 ms after it had answered another one with
// a 429 that the worker read 5 ms later.
//
// So every request also waits for the pacer, which lets one through at a
// time at twice the channel's rate: a bunch leaves at no more than that, and
// each request's answer — a 429 above all — is normally read before the next
// one is admitted (admission.go). At twice the rate the pacer never becomes
// the limit: requests it delayed catch up with the dispatcher's tokens.
type pacer struct {
	l *rate.Limiter
}

// paceFactor is the pacer's rate over the channel's.
const paceFactor = 2

func newPacer(r rate.Limit) *pacer {
	return &pacer{l: rate.NewLimiter(paced(r), 1)}
}

func paced(r rate.Limit) rate.Limit {
	if r == rate.Inf {
		return rate.Inf
	}
	return r * paceFactor
}

// wait blocks until the next request may be written, or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	return p.l.Wait(ctx)
}

// setRate follows the channel's send rate (graceful degradation).
func (p *pacer) setRate(r rate.Limit) {
	p.l.SetLimit(paced(r))
}
