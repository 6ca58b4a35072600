package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// recorder is a channel for the engine's own tests: it records what it is
// asked to send and answers with outcome (delivered by default). The real
// channels have their own tests against their providers.
type recorder struct {
	name    string
	mu      sync.Mutex
	sent    []notify.Notification
	outcome func(a *delivery.Attempt) delivery.Outcome
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Limits() delivery.Limits {
	return delivery.Limits{Rate: 1000, RecipientRate: func(string) rate.Limit { return 1000 }}
}
func (r *recorder) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.Channel(r.name))
}
func (r *recorder) Probe(context.Context) error { return nil }
func (r *recorder) Send(_ context.Context, a *delivery.Attempt) delivery.Outcome {
	if err := a.Admit(); err != nil {
		return delivery.Outcome{Kind: delivery.NotSent}
	}
	o := delivery.Outcome{Kind: delivery.Delivered, ProviderID: "m-" + a.Notification.Key}
	if r.outcome != nil {
		o = r.outcome(a)
	}
	if o.Kind == delivery.Delivered {
		r.mu.Lock()
		r.sent = append(r.sent, a.Notification)
		r.mu.Unlock()
	}
	return o
}
func (r *recorder) delivered() []notify.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Notification(nil), r.sent...)
}

func routed(key string, chat int64, email string) notify.Notification {
	return notify.Notification{Key: key, ChatID: chat, Email: email, Text: "Order accepted",
		Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelEmail}}
}

// A blocked Telegram chat: the notification moves to email and is
// delivered there once; Telegram's copy is dead-lettered by reason; the
// application hears of the fallback and the delivery. A healthy chat gets
// no email.
func TestFallbackWhenTheChatIsDead(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	email := &recorder{name: "email"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: email})
	env.Publish(routed("order:1:accepted", 200, "ann@example.com"))
	env.Publish(routed("order:2:accepted", 100, "bob@example.com"))
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(email.delivered()) >= 1 && env.Emu.Stats().Delivered >= 1 }, "both delivered")
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 2 }, "two delivered events")
	if got := email.delivered(); len(got) != 1 || got[0].Key != "order:1:accepted" {
		t.Fatalf("email sent %v, want only order:1", got)
	}
	if got := env.Emu.ChatMessages(100); len(got) != 1 {
		t.Fatalf("chat 100 got %d messages, want 1", len(got))
	}
	dl := env.DeadLetters()
	if len(dl) != 1 || dl[0].Subject != "dead.notify.telegram.blocked.200" {
		t.Fatalf("dead letters %v, want one on dead.notify.telegram.blocked.200", subjects(dl))
	}
	fb := env.Events(delivery.EventFallback)
	if len(fb) != 1 || fb[0].Key != "order:1:accepted" || fb[0].Channel != "telegram" || fb[0].Next != "email" || fb[0].Reason != "blocked" {
		t.Fatalf("fallback events %+v", fb)
	}
	byKey := map[string]string{}
	for _, ev := range env.Events(delivery.EventDelivered) {
		byKey[ev.Key] = ev.Channel
	}
	if byKey["order:1:accepted"] != "email" || byKey["order:2:accepted"] != "telegram" {
		t.Fatalf("delivered events by key %v", byKey)
	}
}

// A Telegram outage longer than fallback_after moves the notification to
// the next channel; when the outage ends Telegram does not send a copy.
func TestFallbackAfterTimeout(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.FallbackTransactional = 1500 * time.Millisecond
	cfg.BreakerOpen, cfg.MaxAttempts = 300*time.Millisecond, 1000 // the bulk one retries until the outage ends
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	tw := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	sms := &recorder{name: "sms"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: sms})
	n := notify.Notification{Key: "order:3:accepted", ChatID: 300, Phone: "+79991234567", Text: "Order accepted",
		Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelSMS}}
	env.Publish(n)
	bulk := n
	bulk.Key, bulk.Priority = "promo:3", notify.PriorityBulk // bulk never falls back by default
	env.Publish(bulk)
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(sms.delivered()) == 1 }, "the SMS")
	env.Emu.StopOutage()
	natstest.WaitFor(t, 20*time.Second, func() bool { return env.Emu.Stats().Delivered >= 1 }, "the bulk message by Telegram")
	natstest.WaitFor(t, 10*time.Second, func() bool { return tw.Stats().QueueDepth == 0 }, "the telegram worker's queue to drain")
	if got := env.Emu.Messages(); len(got) != 1 || got[0].Text != "Order accepted" {
		t.Fatalf("Telegram delivered %d messages after the outage, want 1 (the bulk one only)", len(got))
	}
	if got := sms.delivered(); len(got) != 1 || got[0].Key != "order:3:accepted" {
		t.Fatalf("SMS sent %v, want only the transactional one", got)
	}
	dl := env.DeadLetters()
	if len(dl) != 1 || dl[0].Subject != "dead.notify.telegram.fallback_timeout.300" {
		t.Fatalf("dead letters %v, want one fallback_timeout", subjects(dl))
	}
}

// Every channel dead: a dead letter on each, one dead event.
func TestEveryChannelDead(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	email := &recorder{name: "email", outcome: func(*delivery.Attempt) delivery.Outcome {
		return delivery.Outcome{Kind: delivery.RecipientDead, Reason: "hard_bounce", Code: 550, Description: "550 5.1.1 user unknown"}
	}}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: email})
	env.Publish(routed("order:4:accepted", 200, "gone@example.com"))
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 2 }, "two dead letters")
	got := subjects(env.DeadLetters())
	want := map[string]bool{"dead.notify.telegram.blocked.200": true, "dead.notify.email.hard_bounce.e" + notify.HashAddress("gone@example.com"): true}
	for _, s := range got {
		if !want[s] {
			t.Fatalf("dead letters %v, want one per channel with its reason", got)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDead)) == 1 }, "one dead event")
	if ev := env.Events(delivery.EventDead)[0]; ev.Key != "order:4:accepted" || ev.Channel != "email" || ev.Reason != "hard_bounce" {
		t.Fatalf("dead event %+v", ev)
	}
}

func subjects(ms []*natsjs.RawStreamMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Subject
	}
	return out
}

// The race of a late success against a published fallback: a success the
// worker knows of cannot race a fallback (it records and acks); the window
// left is a request whose answer never came although Telegram took it (the
// connection dropped after the request was written), followed by the
// fallback. The customer then gets both, and the worker counts exactly
// those: fallbacks_after_maybe_delivered_total.
func TestLateSuccessWindowIsCounted(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.MaxAttempts = 2 // spent quickly: the fallback follows a maybe-delivered attempt
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.FaultDeliverDrop}); err != nil {
		t.Fatal(err)
	}
	tw := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	email := &recorder{name: "email"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: email})
	env.Publish(routed("order:5:accepted", 500, "eve@example.com"))
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(email.delivered()) == 1 }, "the email")
	copies := len(env.Emu.ChatMessages(500))
	if copies == 0 {
		t.Fatal("Telegram recorded no copy: the outage did not deliver before dropping the connection")
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		return metricValue(t, tw, "tgnotify_worker_fallbacks_after_maybe_delivered_total") == 1
	}, "the fallback counted as following a maybe-delivered attempt")
	t.Logf("the customer got %d Telegram copies (responses dropped) and the email: the documented window", copies)
}

// metricValue reads a counter or gauge of a worker's registry (0 if
// absent).
func metricValue(t *testing.T, w *testenv.Worker, name string) float64 {
	t.Helper()
	mfs, err := w.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				v += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				v += g.GetValue()
			}
		}
	}
	return v
}
