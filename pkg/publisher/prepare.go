package publisher

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Bounds of one Prepare. Its JetStream API requests go unanswered while
// the stream or the meta group elects a leader, and one made just before
// the new leader came waits for its full timeout. A short attempt retried
// soon answers right after an election; one that ran out of time gets
// twice as long the next time, so a slow server still answers.
const (
	firstPrepareTimeout = time.Second
	maxPrepareTimeout   = 16 * time.Second
)

// preparer runs Options.Prepare: once before the first publish, waiting
// for it (run), and again in the background while NOTIFY answers "no
// responders" (start), in case the stream was deleted.
//
// The background attempts never hold publishing back. In a cluster "no
// responders" mostly means that NOTIFY, and often the meta group too, is
// electing a leader; a Prepare made then waits out its timeout, which had
// grown to 4 s by the time a 6 s election ended. While the drain loop waited
// for it, the publisher stored nothing for that long after NOTIFY had its
// new leader: the SIGKILL of NOTIFY's leader cost ~9.9 s of silence instead
// of the election's 5-9 s (BENCHMARKS.md, row 7b, three runs of six).
//
// A preparer is used by one goroutine (the drain loop); only the attempt
// it starts runs on another, and wait waits for it.
type preparer struct {
	prepare func(context.Context) error
	timeout time.Duration // of the next attempt
	running bool          // an attempt started by start has not been collected
	results chan prepared // the attempt's outcome, buffered
	wg      sync.WaitGroup
}

// prepared is the outcome of one attempt.
type prepared struct {
	err      error
	timedOut bool
}

func newPreparer(prepare func(context.Context) error) *preparer {
	return &preparer{prepare: prepare, timeout: firstPrepareTimeout, results: make(chan prepared, 1)}
}

// run makes one attempt and waits for it.
func (p *preparer) run(ctx context.Context) error {
	res := p.attempt(ctx, p.timeout)
	p.account(res)
	return res.err
}

// start begins an attempt in the background unless one is under way.
// collect reports how it ended.
func (p *preparer) start(ctx context.Context) {
	if p.running {
		return
	}
	p.running = true
	timeout := p.timeout
	p.wg.Go(func() { p.results <- p.attempt(ctx, timeout) })
}

// collect returns the error of a background attempt that has ended, and
// whether one had; it does not wait.
func (p *preparer) collect() (err error, ended bool) {
	if !p.running {
		return nil, false
	}
	select {
	case res := <-p.results:
		p.running = false
		p.account(res)
		return res.err, true
	default:
		return nil, false
	}
}

// wait waits until a background attempt has returned. Its ctx should be
// done by then, or the attempt takes up to its timeout.
func (p *preparer) wait() { p.wg.Wait() }

// attempt runs Prepare once, bounded by timeout.
func (p *preparer) attempt(ctx context.Context, timeout time.Duration) prepared {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.prepare(pctx)
	return prepared{err: err, timedOut: err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil}
}

// account adjusts the next attempt's timeout to how this one ended.
func (p *preparer) account(res prepared) {
	switch {
	case res.timedOut:
		p.timeout = min(2*p.timeout, maxPrepareTimeout)
	case res.err == nil:
		p.timeout = firstPrepareTimeout
	}
}
