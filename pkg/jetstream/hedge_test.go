package jetstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// A lookup lost in an election is never answered; its copy sent after the
// election is. Hedge sends the copy every interval and returns the first
// answer as soon as it comes, with every other call ended.
func TestHedgeSendsAnUnansweredLookupAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
		defer cancel()
		electionEnds := time.Now().Add(1200 * time.Millisecond)
		var calls, running atomic.Int32
		start := time.Now()
		got, err := jetstream.Hedge(ctx, 500*time.Millisecond, func(ctx context.Context) (int, error) {
			n := calls.Add(1)
			running.Add(1)
			defer running.Add(-1)
			if time.Now().Before(electionEnds) {
				<-ctx.Done() // lost: no leader to answer it
				return 0, ctx.Err()
			}
			time.Sleep(10 * time.Millisecond) // the answer's round trip
			return int(n), nil
		})
		if err != nil || got != 4 {
			t.Fatalf("Hedge = %d, %v; want the answer of the 4th call (sent at 1.5 s, after the election)", got, err)
		}
		if took := time.Since(start); took != 1510*time.Millisecond {
			t.Errorf("answered after %v, want 1.51 s: the first copy sent after the election, and its round trip", took)
		}
		if n := running.Load(); n != 0 {
			t.Errorf("%d calls still running when Hedge returned", n)
		}
	})
}

// An answer that comes back is returned as it is, an error too (the
// server's answer, such as "stream not found"); and when nothing answers
// the first call's error comes back once ctx ends.
func TestHedgeReturnsTheFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		notFound := errors.New("stream not found")
		var calls atomic.Int32
		_, err := jetstream.Hedge(t.Context(), 500*time.Millisecond, func(ctx context.Context) (int, error) {
			calls.Add(1)
			return 0, notFound
		})
		if !errors.Is(err, notFound) || calls.Load() != 1 {
			t.Fatalf("Hedge = %v after %d calls, want the server's answer after 1", err, calls.Load())
		}

		ctx, cancel := context.WithTimeout(t.Context(), 1900*time.Millisecond)
		defer cancel()
		calls.Store(0)
		_, err = jetstream.Hedge(ctx, 500*time.Millisecond, func(ctx context.Context) (int, error) {
			calls.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Hedge with nothing answering = %v, want the deadline", err)
		}
		if n := calls.Load(); n != 4 {
			t.Errorf("%d calls in 1.9 s, want 4 (at 0, 0.5, 1 and 1.5 s)", n)
		}
	})
}
