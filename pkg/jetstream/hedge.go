package jetstream

import (
	"context"
	"sync"
	"time"
)

// HedgeEvery is how long a read request goes unanswered before Hedge sends
// it again.
const HedgeEvery = 500 * time.Millisecond

// Hedge calls read, and again every interval while no call has returned,
// all of them with ctx; it returns what the first call to return gave (an
// error too: one that comes back is the server's answer), once the others
// have been cancelled and returned.
//
// A JetStream API request sent while its stream or consumer elects a
// leader, or to a node that was cut off, is never answered: it waits out
// its whole timeout. A copy sent after the election ends is answered at
// once, so a hedged read is answered within interval of the new leader
// instead of when its bound runs out (the long chaos run on the cluster:
// worker starts of 10.6 s on lookups bounded at 2 and 4 s; takeover checks
// of a recipient's messages that waited out 5 s sixteen at a time). Only
// reads may be hedged: their copies change nothing.
func Hedge[T any](ctx context.Context, interval time.Duration, read func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type answer struct {
		v   T
		err error
	}
	answers := make(chan answer, 1)
	send := func() {
		wg.Go(func() {
			v, err := read(ctx)
			select {
			case answers <- answer{v, err}:
			default: // another call answered first
			}
		})
	}
	send()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case a := <-answers:
			return a.v, a.err
		case <-ctx.Done():
			// Every call returns soon: they share ctx.
			a := <-answers
			return a.v, a.err
		case <-t.C:
			if ctx.Err() == nil {
				send()
			}
		}
	}
}
