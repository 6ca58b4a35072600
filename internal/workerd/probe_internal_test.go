package workerd

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// probeChannel answers Probe with answer after delay, or waits for its
// context when answer is nil and delay zero.
type probeChannel struct {
	delivery.Channel
	answer error
	delay  time.Duration
}

func (c probeChannel) Probe(ctx context.Context) error {
	if c.answer == nil && c.delay == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(c.delay):
		return c.answer
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errRejected = errors.New("401 Unauthorized")

func isRejected(err error) bool { return errors.Is(err, errRejected) }

// The probe runs beside the start-up: rejected credentials end it at once,
// with the probe's error there to be found; an unanswered probe ends at
// its timeout without touching the start-up; stop ends a probe still
// running.
func TestStartupProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, abort := context.WithCancelCause(t.Context())
		p := startProbe(t.Context(), probeChannel{answer: errRejected, delay: time.Second}, 4*time.Second, isRejected, abort)
		if p.fatal() != nil {
			t.Fatal("fatal before the probe answered")
		}
		<-start.Done() // the start-up, aborted
		if err := p.fatal(); !errors.Is(err, errRejected) {
			t.Fatalf("fatal once the start-up was aborted = %v, want the rejection", err)
		}
		if !errors.Is(context.Cause(start), errRejected) {
			t.Fatalf("the start-up ended by %v, want the rejection", context.Cause(start))
		}
		p.stop()

		start, abort = context.WithCancelCause(t.Context())
		begin := time.Now()
		p = startProbe(t.Context(), probeChannel{}, 4*time.Second, isRejected, abort)
		if err := p.wait(t.Context()); !errors.Is(err, context.DeadlineExceeded) || time.Since(begin) != 4*time.Second {
			t.Fatalf("an unanswered probe = %v after %v, want its deadline after 4s", err, time.Since(begin))
		}
		if p.fatal() != nil || start.Err() != nil {
			t.Fatalf("an unanswered probe: fatal %v, start-up %v; want neither", p.fatal(), start.Err())
		}

		// A start-up that ends (SIGTERM) stops waiting for the probe.
		stopped, stop := context.WithCancel(t.Context())
		p = startProbe(t.Context(), probeChannel{}, 4*time.Second, isRejected, abort)
		time.AfterFunc(time.Second, stop)
		begin = time.Now()
		if err := p.wait(stopped); !errors.Is(err, context.Canceled) || time.Since(begin) != time.Second {
			t.Fatalf("waiting for the probe through a stop = %v after %v, want context.Canceled after 1s", err, time.Since(begin))
		}
		p.stop()

		begin = time.Now()
		p = startProbe(t.Context(), probeChannel{}, 4*time.Second, isRejected, abort)
		p.stop()
		if time.Since(begin) != 0 || start.Err() != nil {
			t.Fatalf("stop took %v and the start-up ended by %v; want at once and nothing", time.Since(begin), start.Err())
		}
	})
}
