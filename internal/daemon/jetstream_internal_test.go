package daemon

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// An attempt that runs out of time is retried soon with twice the time,
// up to maxAttemptTimeout; one that fails at once keeps its bound. A
// conflict ends the wait.
func TestWaitRetriesWithGrowingAttemptTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &Objects{log: slog.New(slog.DiscardHandler)}
		var bounds []time.Duration
		calls := 0
		err := o.retry(t.Context(), func(ctx context.Context) error {
			calls++
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
		want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second, 16 * time.Second, 16 * time.Second}
		if len(bounds) != len(want) {
			t.Fatalf("attempt bounds %v, want %v", bounds, want)
		}
		for i := range want {
			if bounds[i] != want[i] {
				t.Errorf("attempt %d had %v, want %v (all: %v)", i+1, bounds[i], want[i], bounds)
			}
		}

		calls = 0
		conflict := &jetstream.ConflictError{}
		err = o.retry(t.Context(), func(context.Context) error { calls++; return conflict })
		if !errors.As(err, &conflict) || calls != 1 {
			t.Errorf("retry over a conflict = %v after %d calls, want the conflict after 1", err, calls)
		}

		ctx, cancel := context.WithCancel(t.Context())
		calls = 0
		err = o.retry(ctx, func(context.Context) error {
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
