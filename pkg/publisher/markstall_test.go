package publisher_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestPublishingGoesOnWhileMarkingWaits: a marking that waits (for the
// application's write lock, in production; here the AfterAck hook, which
// runs in the mark stage, holds it) does not stop rows from reaching the
// stream. The rows come one commit at a time, so every acknowledged chunk
// is one row: the queue to the mark stage was bounded in chunks (32 with
// the default options) and publishing stopped after about forty rows,
// which at 500 orders a second was the 100–300 ms gaps of benchmark row 8.
// Once the marking goes on, everything is marked once, in order.
func TestPublishingGoesOnWhileMarkingWaits(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := newEnv(t)
			tr.prepare(t, e)
			release := make(chan struct{})
			var releaseOnce sync.Once
			var calls atomic.Int64
			opts := testOptions(nil)
			opts.AfterAck = func([]outbox.Row) error {
				if calls.Add(1) == 1 {
					<-release // the first marking waits
				}
				return nil
			}
			e.start(t, opts)
			// Registered after start, so it runs before the publisher is
			// stopped: a failed test must not leave the marking waiting.
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

			const n = 200
			for i := range n {
				e.enqueue(t, i, i+1, 10, 1)
				waitFor(t, 10*time.Second, func() bool { return streamCount(e.js) == uint64(i+1) },
					fmt.Sprintf("row %d stored while the first marking waits", i+1))
			}
			if got := e.pending(t); got != n {
				t.Fatalf("%d rows pending while the first marking waits, want all %d", got, n)
			}
			releaseOnce.Do(func() { close(release) })
			waitFor(t, 30*time.Second, func() bool { return e.pending(t) == 0 }, "every row marked once the marking goes on")
			checkOnceInOrder(t, e.js, n, 10)
		})
	}
}
