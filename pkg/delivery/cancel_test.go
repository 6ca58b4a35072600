package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// gatedChat is a Bot API client whose requests to one chat wait at a gate
// before they go to the emulator: the test holds a send in flight for as
// long as it needs.
type gatedChat struct {
	telegram.Sender
	chat    int64
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGatedChat(s telegram.Sender, chat int64) *gatedChat {
	return &gatedChat{Sender: s, chat: chat, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gatedChat) SendMessage(ctx context.Context, p botapi.SendMessageParams) (*botapi.Message, error) {
	if p.ChatID == g.chat {
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Sender.SendMessage(ctx, p)
}

// A notification cancelled after it was published but before a worker got
// it is acked without a request; the cancel reports it cancelled, once,
// and a second cancel says it was cancelled before.
func TestCancelAfterPublishBeforeSend(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	ctx := context.Background()
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg}).Stop(t) // provisions the consumer and buckets
	for _, k := range []string{"C1", "C2", "C3", "C4"} {
		env.Publish(note("order:"+k+":accepted", 100, "Order "+k+" accepted"))
	}
	res, err := delivery.Cancel(ctx, env.JS, jetstream.DefaultNames(), "order:C3:accepted", "test", time.Now())
	if err != nil || res.Outcome != delivery.Cancelled || res.Earlier {
		t.Fatalf("Cancel = %+v, %v; want cancelled", res, err)
	}
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})

	waitDelivered(t, env, 3)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 3 }, "three delivered events")
	if got := texts(env.Emu.ChatMessages(100)); len(got) != 3 || got[0] != "Order C1 accepted" || got[2] != "Order C4 accepted" {
		t.Fatalf("chat 100 got %q, want C1, C2, C4", got)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return metricValue(t, w, "tgnotify_worker_cancelled_total") == 1 }, "the worker to ack C3 as cancelled")
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventCancelled)) == 1 }, "the cancelled event")
	if ev := env.Events(delivery.EventCancelled)[0]; ev.Key != "order:C3:accepted" {
		t.Fatalf("cancelled event %+v, want order:C3", ev)
	}
	if n := len(env.Events(delivery.EventCancelTooLate)); n != 0 {
		t.Fatalf("%d cancel_too_late events, want none", n)
	}
	res, err = delivery.Cancel(ctx, env.JS, jetstream.DefaultNames(), "order:C3:accepted", "test again", time.Now())
	if err != nil || res.Outcome != delivery.Cancelled || !res.Earlier || res.Record.CancelledBy != "test" {
		t.Fatalf("second Cancel = %+v, %v; want cancelled earlier by test", res, err)
	}
	res, err = delivery.Cancel(ctx, env.JS, jetstream.DefaultNames(), "order:C1:accepted", "test", time.Now())
	if err != nil || res.Outcome != delivery.CancelTooLate || res.Record.State != delivery.StateDelivered || res.Record.Channel != "telegram" {
		t.Fatalf("Cancel of a delivered one = %+v, %v; want too late, delivered by telegram", res, err)
	}
}

// A cancel that comes while the send is in flight (the request is held at
// a gate) loses to the send's claim: it reports too late, the message is
// delivered once, and the events say delivered and cancel_too_late, never
// cancelled. A worker restarted after the send does not send it again.
func TestCancelDuringSend(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	ctx := context.Background()
	gate := newGatedChat(env.Client(testenv.Token), 100)
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg, API: gate})
	env.Publish(note("order:D1:accepted", 100, "Order D1 accepted"))

	select {
	case <-gate.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the send did not start")
	}
	res, err := delivery.Cancel(ctx, env.JS, jetstream.DefaultNames(), "order:D1:accepted", "test", time.Now())
	if err != nil || res.Outcome != delivery.CancelTooLate || res.Record.State != delivery.StateSending || res.Record.Channel != "telegram" {
		t.Fatalf("Cancel during the send = %+v, %v; want too late, a telegram send claim", res, err)
	}
	close(gate.open)
	waitDelivered(t, env, 1)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 1 }, "the delivered event")
	w.Stop(t)

	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	res, err = delivery.Cancel(ctx, env.JS, jetstream.DefaultNames(), "order:D1:accepted", "test", time.Now())
	if err != nil || res.Outcome != delivery.CancelTooLate || res.Record.State != delivery.StateDelivered {
		t.Fatalf("Cancel after the send = %+v, %v; want too late, delivered", res, err)
	}
	if got := env.Emu.ChatMessages(100); len(got) != 1 {
		t.Fatalf("chat 100 got %d messages, want 1", len(got))
	}
	if n := len(env.Events(delivery.EventCancelled)); n != 0 {
		t.Fatalf("%d cancelled events, want none", n)
	}
	if evs := env.Events(delivery.EventCancelTooLate); len(evs) != 1 || evs[0].Reason != "sending" {
		t.Fatalf("cancel_too_late events %+v, want one, reason sending", evs)
	}
}

// A send that fails without reaching the provider (a 503: not a 502 or
// 504, after which Telegram may have sent it and the claim stays)
// releases its claim, so a cancel after it still wins, and the retry does
// not send.
func TestCancelAfterAFailedSend(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.BackoffBase, cfg.BackoffCap = 2*time.Second, 2*time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx, Status: 503}); err != nil {
		t.Fatal(err)
	}
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	env.Publish(note("order:E1:accepted", 100, "Order E1 accepted"))
	natstest.WaitFor(t, 10*time.Second, func() bool { return metricValue(t, w, "tgnotify_worker_retries_total") >= 1 }, "a failed attempt")
	var res delivery.CancelResult
	natstest.WaitFor(t, 10*time.Second, func() bool {
		var err error
		res, err = delivery.Cancel(context.Background(), env.JS, jetstream.DefaultNames(), "order:E1:accepted", "test", time.Now())
		return err == nil && res.Outcome == delivery.Cancelled
	}, "the cancel to win once the claim is released")
	env.Emu.StopOutage()
	natstest.WaitFor(t, 20*time.Second, func() bool { return metricValue(t, w, "tgnotify_worker_cancelled_total") == 1 }, "the worker to ack it as cancelled")
	if got := env.Emu.ChatMessages(100); len(got) != 0 {
		t.Fatalf("chat 100 got %d messages, want none", len(got))
	}
}
