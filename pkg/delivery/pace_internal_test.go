package delivery

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// pacedChannel answers the first request with a 429 that its worker reads
// readAfter after writing it — as attempt does, it pauses admission then —
// and every other admitted request with success. It records when each
// admitted request was written.
type pacedChannel struct {
	telegramLike
	w         *Worker
	readAfter time.Duration

	mu      sync.Mutex
	written []time.Time
}

// telegramLike is what the internal tests' channels share: Telegram's
// rates (30/s, 1/s per recipient), one recipient, credentials that work.
type telegramLike struct{}

func (telegramLike) Name() string { return "test" }
func (telegramLike) Limits() Limits {
	return Limits{Rate: 30, RecipientRate: func(string) rate.Limit { return 1 }}
}
func (telegramLike) Recipient(n notify.Notification) (string, error) { return "1", nil }
func (telegramLike) Probe(context.Context) error                     { return nil }

func (c *pacedChannel) Send(ctx context.Context, a *Attempt) Outcome {
	if err := a.Admit(); err != nil {
		return Outcome{Kind: NotSent}
	}
	c.mu.Lock()
	c.written = append(c.written, time.Now())
	first := len(c.written) == 1
	c.mu.Unlock()
	if first {
		time.Sleep(c.readAfter)
		c.w.adm.pauseFor(pause{Until: time.Now().Add(time.Second), Reason: "429"}, nil)
		return Outcome{Kind: RetryAfter, Delay: time.Second}
	}
	return Outcome{Kind: Delivered}
}

// Sends held up together (their claims came back as one batch after an
// election) leave one at a time at twice the channel's rate, so the answer
// to one — a 429 above all — is read before the next is admitted. Found by
// the chaos cluster run: 16 requests left within a millisecond after their
// claims, and 3 reached Telegram inside a pause the worker read 12 ms after
// the 429 was written. Without the pacer all 16 are written here.
func TestSendsReleasedTogetherLeavePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := &pacedChannel{readAfter: 12 * time.Millisecond}
		cfg := Config{RequestTimeout: time.Second}
		w := &Worker{
			channel: ch, log: slog.New(slog.DiscardHandler), now: time.Now,
			adm:     newAdmission("paced", 1000, time.Minute, nil),
			pace:    newPacer(ch.Limits().Rate),
			degrade: newDegrader(cfg, ch.Limits().Rate),
		}
		ch.w = w
		const bunch = 16
		outcomes := make([]Outcome, bunch)
		var wg sync.WaitGroup
		for i := range bunch {
			wg.Go(func() {
				j := &job{n: notify.Notification{Key: "k", ChatID: 1}}
				o, tk, _, _, _ := w.send(t.Context(), j, "1", 1)
				tk.settle(o)
				outcomes[i] = o
			})
		}
		wg.Wait()
		if len(ch.written) != 1 {
			t.Fatalf("%d requests written, want only the one answered with the 429 (at %v)", len(ch.written), ch.written)
		}
		notSent := 0
		for _, o := range outcomes {
			if o.Kind == NotSent {
				notSent++
			}
		}
		if notSent != bunch-1 {
			t.Errorf("%d sends refused by the pause, want %d", notSent, bunch-1)
		}
	})
}

// Without a pause, the bunch leaves at twice the channel's rate: the gaps
// between writes are at least 1/(2·rate), and the pacer follows a rate
// change.
func TestPacerSpacesWritesAtTwiceTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(50)
		check := func(n int, gap time.Duration) {
			t.Helper()
			times := make([]time.Time, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if err := p.wait(t.Context()); err != nil {
						t.Error(err)
					}
					times[i] = time.Now()
				})
			}
			wg.Wait()
			slices.SortFunc(times, time.Time.Compare)
			for i := 1; i < n; i++ {
				if d := times[i].Sub(times[i-1]); d < gap {
					t.Fatalf("writes %d and %d %v apart, want at least %v", i-1, i, d, gap)
				}
			}
			if total := times[n-1].Sub(times[0]); total > time.Duration(n)*gap {
				t.Errorf("%d writes took %v, want about %v: the pacer is slower than twice the rate", n, total, time.Duration(n-1)*gap)
			}
		}
		check(10, 10*time.Millisecond)
		p.setRate(5)
		time.Sleep(time.Second)
		check(5, 100*time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := p.wait(ctx); err == nil {
			t.Error("wait on an ended context succeeded")
		}
	})
}
