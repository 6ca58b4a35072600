package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// noReconnects is a connection that never reconnects.
func noReconnects() uint64 { return 0 }

// An attempt that runs out of time is retried 200 ms later with twice the
// time, up to maxAttemptTimeout; one that fails at once keeps its bound,
// and the pause after it grows. A conflict ends the wait.
func TestWaitRetriesWithGrowingAttemptTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &Objects{log: slog.New(slog.DiscardHandler)}
		var bounds []time.Duration
		var starts []time.Time
		calls := 0
		err := o.retry(t.Context(), noReconnects, func(ctx context.Context) error {
			calls++
			starts = append(starts, time.Now())
			deadline, ok := ctx.Deadline()
			if !ok {
				t.Fatal("an attempt without a deadline")
			}
			bounds = append(bounds, time.Until(deadline))
			switch {
			case calls <= 5: // a stream leader that does not answer
				<-ctx.Done()
				return ctx.Err()
			case calls == 6: // no responders: fails at once
				return errors.New("nats: no responders available for request")
			default:
				return nil
			}
		})
		if err != nil {
			t.Fatalf("retry = %v, want nil", err)
		}
		want := []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
		if len(bounds) != len(want) {
			t.Fatalf("attempt bounds %v, want %v", bounds, want)
		}
		for i := range want {
			if bounds[i] != want[i] {
				t.Errorf("attempt %d had %v, want %v (all: %v)", i+1, bounds[i], want[i], bounds)
			}
		}
		// 200 ms after each attempt that ran out of time, however many
		// came before; after one that failed at once, the pause grows
		// (400 ms: the sixth follows five timed-out ones).
		for i := 1; i < len(starts); i++ {
			gap := starts[i].Sub(starts[i-1]) - want[i-1]
			wantGap := 200 * time.Millisecond
			if i == 6 {
				gap, wantGap = starts[i].Sub(starts[i-1]), 400*time.Millisecond
			}
			if gap != wantGap {
				t.Errorf("attempt %d began %v after attempt %d ended, want %v", i+1, gap, i, wantGap)
			}
		}

		calls = 0
		conflict := &jetstream.ConflictError{}
		err = o.retry(t.Context(), noReconnects, func(context.Context) error { calls++; return conflict })
		if !errors.As(err, &conflict) || calls != 1 {
			t.Errorf("retry over a conflict = %v after %d calls, want the conflict after 1", err, calls)
		}

		ctx, cancel := context.WithCancel(t.Context())
		calls = 0
		err = o.retry(ctx, noReconnects, func(context.Context) error {
			calls++
			if calls == 2 {
				cancel()
			}
			return errors.New("JetStream system temporarily unavailable")
		})
		if !errors.Is(err, context.Canceled) || calls != 2 {
			t.Errorf("retry after its context ended = %v after %d calls, want context.Canceled after 2", err, calls)
		}
	})
}

// An attempt waiting for an answer on a connection that has since been
// re-established is cut short and tried again at once, with the same
// bound: its answer will not come.
func TestWaitCutsAnAttemptShortOnReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &Objects{log: slog.New(slog.DiscardHandler)}
		var reconnects atomic.Uint64
		var starts []time.Time
		var bounds []time.Duration
		var causes []error
		begin := time.Now()
		err := o.retry(t.Context(), reconnects.Load, func(ctx context.Context) error {
			deadline, _ := ctx.Deadline()
			starts, bounds = append(starts, time.Now()), append(bounds, time.Until(deadline))
			if len(starts) == 3 {
				return nil
			}
			if len(starts) == 2 {
				// Reconnected 500 ms into the second attempt, its request
				// lost with the old connection.
				time.AfterFunc(500*time.Millisecond, func() { reconnects.Add(1) })
			}
			<-ctx.Done()
			causes = append(causes, context.Cause(ctx))
			return ctx.Err()
		})
		if err != nil {
			t.Fatalf("retry = %v, want nil", err)
		}
		if len(starts) != 3 {
			t.Fatalf("%d attempts, want 3", len(starts))
		}
		if !errors.Is(causes[0], context.DeadlineExceeded) || !errors.Is(causes[1], errReconnected) {
			t.Fatalf("the attempts ended by %v, want the first by its bound, the second by the reconnect", causes)
		}
		// First: 2 s, then 200 ms apart; the second (4 s) cut 500-600 ms
		// in; the third at once, with the second's bound.
		second := starts[1].Sub(begin)
		if want := 2*time.Second + 200*time.Millisecond; second != want {
			t.Errorf("second attempt at %v, want %v", second, want)
		}
		if d := starts[2].Sub(starts[1]); d < 500*time.Millisecond || d > 500*time.Millisecond+reconnectPoll {
			t.Errorf("third attempt %v after the second, want within a poll (%v) of the reconnect 500ms in", d, reconnectPoll)
		}
		if want := []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second}; bounds[2] != want[2] || bounds[1] != want[1] {
			t.Errorf("attempt bounds %v, want %v", bounds, want)
		}
	})
}
