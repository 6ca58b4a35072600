package delivery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// answeringChannel answers recipient "first" with a 429 whose first byte
// arrives at once (Attempt.Answered) but which its goroutine classifies
// only parseAfter later — as a loaded machine schedules it — and every
// other admitted request with success. It records the recipients it wrote
// to.
type answeringChannel struct {
	telegramLike
	w          *Worker
	parseAfter time.Duration
	answered   chan struct{}

	mu      sync.Mutex
	written []string
}

func (c *answeringChannel) Send(ctx context.Context, a *Attempt) Outcome {
	if err := a.Admit(); err != nil {
		return Outcome{Kind: NotSent}
	}
	c.mu.Lock()
	c.written = append(c.written, a.Recipient)
	c.mu.Unlock()
	if a.Recipient != "first" {
		return Outcome{Kind: Delivered}
	}
	a.Answered()
	close(c.answered)
	time.Sleep(c.parseAfter)
	c.w.adm.pauseFor(pause{Until: time.Now().Add(time.Second), Reason: "429"}, nil)
	return Outcome{Kind: RetryAfter, Delay: time.Second}
}

// A request about to be written after a 429 has begun to arrive, but
// before the attempt that reads it has paused admission, waits for that
// and is refused: it never reaches the provider. Found by the CI chaos
// run: a request reached Telegram 7 ms after Telegram had written a 429 to
// the same worker. Without the wait the second request is written.
func TestNoRequestLeavesBetweenA429ArrivingAndItsPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := &answeringChannel{parseAfter: 7 * time.Millisecond, answered: make(chan struct{})}
		cfg := Config{RequestTimeout: time.Second}
		w := &Worker{
			channel: ch, log: slog.New(slog.DiscardHandler), now: time.Now,
			adm:     newAdmission("answering", 1000, time.Minute, nil),
			degrade: newDegrader(cfg, ch.Limits().Rate),
		}
		ch.w = w
		first := make(chan Outcome, 1)
		go func() {
			o, tk, _, _, _ := w.send(t.Context(), &job{n: notify.Notification{Key: "a", ChatID: 1}}, "first", 1)
			tk.settle(o)
			first <- o
		}()
		<-ch.answered
		start := time.Now()
		o, tk, refused, _, _ := w.send(t.Context(), &job{n: notify.Notification{Key: "b", ChatID: 2}}, "second", 1)
		tk.settle(o)
		waited := time.Since(start)
		if got := (<-first).Kind; got != RetryAfter {
			t.Fatalf("first request: %v, want RetryAfter", got)
		}
		if o.Kind != NotSent || refused == nil || refused.Reason != "paused" {
			t.Fatalf("request after the 429 began to arrive: %v (refused: %v), want not sent, paused", o.Kind, refused)
		}
		if waited != ch.parseAfter {
			t.Errorf("it waited %v, want the %v until the 429 was classified", waited, ch.parseAfter)
		}
		if len(ch.written) != 1 {
			t.Fatalf("written to %v, want only the request answered with the 429", ch.written)
		}
	})
}

// A request waits only for the answers that began before it asked, and at
// most answerWaitMax for one that is never settled; an answer noticed after
// its request was settled holds nothing up.
func TestAnswerWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission("test", 1000, time.Minute, nil)
		if got := a.awaitAnswers(); got != answersNone {
			t.Fatalf("nothing pending: %v, want none", got)
		}
		admit := func() *ticket {
			t.Helper()
			tk, err := a.admit(time.Now(), "")
			if err != nil {
				t.Fatal(err)
			}
			return tk
		}
		// Never settled: the wait gives up after the bound.
		stuck := admit()
		stuck.answering()
		start := time.Now()
		if got := a.awaitAnswers(); got != answersTimedOut {
			t.Fatalf("an answer never settled: %v, want timeout", got)
		}
		if d := time.Since(start); d != answerWaitMax {
			t.Fatalf("waited %v, want %v", d, answerWaitMax)
		}
		stuck.settle(Outcome{Kind: Delivered})

		// Settled while a later answer begins: only the earlier one counts.
		early, late := admit(), admit()
		early.answering()
		done := make(chan answerWait)
		go func() { done <- a.awaitAnswers() }()
		synctest.Wait()
		late.answering()
		time.Sleep(time.Millisecond)
		early.settle(Outcome{Kind: Delivered})
		start = time.Now()
		if got := <-done; got != answersSettled {
			t.Fatalf("the earlier answer settled: %v, want settled", got)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("returned %v after the earlier answer settled, want at once", d)
		}
		late.settle(Outcome{Kind: Delivered})

		// Noticed after settling, or twice: nothing is pending.
		gone := admit()
		gone.settle(Outcome{Kind: Delivered})
		gone.answering()
		again := admit()
		again.answering()
		again.answering()
		again.settle(Outcome{Kind: Delivered})
		var nilTicket *ticket
		nilTicket.answering()
		if got := a.awaitAnswers(); got != answersNone {
			t.Fatalf("after late and repeated notices: %v, want none pending", got)
		}
		var na *NotAdmittedError
		if _, err := a.admit(time.Now(), ""); errors.As(err, &na) {
			t.Fatalf("admit: %v", err)
		}
	})
}
