package delivery_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// A scheduled notification is not sent before its not_before, even when
// the worker that handed it back stops and another one starts; a later
// notification of the same chat is not held back by it (the documented
// rule: a scheduled notification steps out of its recipient's order).
func TestNotBeforeAcrossRestart(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	first := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})

	now := time.Now().UTC()
	later := note("reminder:A1", 100, "Your table is booked for tonight")
	later.CreatedAt, later.NotBefore = now, now.Add(4*time.Second)
	env.Publish(later)
	env.Publish(note("order:A2:accepted", 100, "Order A2 accepted"))

	natstest.WaitFor(t, 10*time.Second, func() bool {
		return metricValue(t, first, "tgnotify_worker_scheduled_naks_total") >= 1
	}, "the scheduled message handed back")
	waitDelivered(t, env, 1)
	first.Stop(t)
	if got := texts(env.Emu.ChatMessages(100)); len(got) != 1 || got[0] != "Order A2 accepted" {
		t.Fatalf("chat 100 got %q before not_before, want only the unscheduled order", got)
	}

	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	waitDelivered(t, env, 2)
	msgs := env.Emu.ChatMessages(100)
	if len(msgs) != 2 || msgs[1].Text != later.Text {
		t.Fatalf("chat 100 got %q, want the order and then the reminder", texts(msgs))
	}
	if msgs[1].Time.Before(later.NotBefore) {
		t.Fatalf("the reminder was sent at %v, before its not_before %v", msgs[1].Time, later.NotBefore)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 2 }, "two delivered events")
}

// fallback_after counts from not_before: a notification scheduled further
// ahead than its fallback_after does not move to the next channel the
// moment it comes due.
func TestFallbackCountsFromNotBefore(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.FallbackTransactional = time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	email := &recorder{name: "email"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: email})

	now := time.Now().UTC()
	n := routed("reminder:B1", 100, "ann@example.com")
	n.CreatedAt, n.NotBefore = now, now.Add(2*time.Second)
	env.Publish(n)
	waitDelivered(t, env, 1)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 1 }, "the delivered event")
	if ev := env.Events(delivery.EventDelivered)[0]; ev.Channel != "telegram" || ev.At.Before(n.NotBefore) {
		t.Fatalf("delivered by %s at %v; want telegram, not before %v", ev.Channel, ev.At, n.NotBefore)
	}
	if got := email.delivered(); len(got) != 0 || len(env.Events(delivery.EventFallback)) != 0 {
		t.Fatalf("email sent %d, fallbacks %d; want none: fallback_after counts from not_before", len(got), len(env.Events(delivery.EventFallback)))
	}
}
