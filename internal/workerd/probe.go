package workerd

import (
	"context"
	"time"

	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// startupProbe checks the provider's credentials while the worker reaches
// JetStream, instead of before: a provider that does not answer costs
// the probe its whole request timeout, which a start in a provider outage
// used to add to the time before the worker served (the long cluster chaos
// run on 631a2fd: 35 of 122 telegram worker starts waited 4 s on getMe,
// while the fallbacks of the orders waiting for Telegram waited for them).
type startupProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
	// isFatal is the worker's Spec.Fatal: whether err means rejected
	// credentials.
	isFatal func(error) bool
}

// startProbe runs ch.Probe, bounded by timeout, on a goroutine of its own.
// When its error is fatal it calls abort with it, to end the start-up.
func startProbe(ctx context.Context, ch delivery.Channel, timeout time.Duration, isFatal func(error) bool, abort context.CancelCauseFunc) *startupProbe {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	p := &startupProbe{cancel: cancel, done: make(chan struct{}), isFatal: isFatal}
	go func() {
		p.err = ch.Probe(pctx)
		// Done before the abort: whoever sees the start-up aborted finds
		// the probe's error.
		close(p.done)
		if p.fatalErr() != nil {
			abort(p.err)
		}
	}()
	return p
}

// wait returns the probe's error once it has ended, or ctx's if ctx ends
// first (a SIGTERM during start-up).
func (p *startupProbe) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fatal returns the probe's error if it has ended with rejected
// credentials, and nil otherwise, without waiting.
func (p *startupProbe) fatal() error {
	select {
	case <-p.done:
		return p.fatalErr()
	default:
		return nil
	}
}

// fatalErr returns err if it means rejected credentials. Called once err
// is set.
func (p *startupProbe) fatalErr() error {
	if p.err != nil && p.isFatal != nil && p.isFatal(p.err) {
		return p.err
	}
	return nil
}

// stop cancels the probe if it still runs and waits for its goroutine.
func (p *startupProbe) stop() {
	p.cancel()
	<-p.done
}
