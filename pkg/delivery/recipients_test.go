package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// offsetClock is the real clock moved forward on demand: the worker's
// timers keep running while a test skips an hour.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
func sends(env *testenv.Env) int64             { return env.Emu.Stats().ByMethod["sendMessage"] }
func deadLetters(env *testenv.Env) func() int  { return func() int { return len(env.DeadLetters()) } }
func waitCount(t *testing.T, f func() int, n int, what string) {
	t.Helper()
	natstest.WaitFor(t, 15*time.Second, func() bool { return f() == n }, what)
}

// labelled reads one labelled counter of a worker's registry.
func labelled(t *testing.T, w *testenv.Worker, name, label, value string) float64 {
	t.Helper()
	mfs, err := w.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// deadMark reads a Telegram chat's dead mark, if any.
func deadMark(t *testing.T, w *testenv.Worker, chat string) (delivery.DeadRecipient, bool) {
	t.Helper()
	e, err := w.Resources.Chats.Get(context.Background(), delivery.DeadRecipientKey("telegram", chat))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return delivery.DeadRecipient{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var d delivery.DeadRecipient
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		t.Fatal(err)
	}
	return d, true
}

// TestDeadRetryAfter: with -dead-retry-after 1h, a chat that blocked the
// bot costs no request for an hour. After it, the next message is sent for
// real: still blocked, it is dead-lettered, the mark's time restarts the
// period (the message after it costs no request) and the application is not
// told twice; unblocked, it is delivered, the chat is revived with a
// recipient_revived event, and later messages go as to any chat.
func TestDeadRetryAfter(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.DeadRetryAfter = time.Hour
	clock := &offsetClock{}
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg, Now: clock.Now})

	env.Publish(note("order:1:accepted", 200, "1"))
	waitCount(t, deadLetters(env), 1, "the first message dead-lettered")
	first, ok := deadMark(t, w, "200")
	if !ok || first.Reason != "blocked" {
		t.Fatalf("dead mark = %+v, %v; want blocked", first, ok)
	}
	env.Publish(note("order:2:accepted", 200, "2"))
	waitCount(t, deadLetters(env), 2, "the second message dead-lettered")
	if got := sends(env); got != 1 {
		t.Fatalf("%d sendMessage calls within the hour, want 1", got)
	}

	clock.Advance(61 * time.Minute)
	env.Publish(note("order:3:accepted", 200, "3"))
	waitCount(t, deadLetters(env), 3, "the retried message dead-lettered")
	if got := sends(env); got != 2 {
		t.Fatalf("%d sendMessage calls after the hour, want 2 (one retry)", got)
	}
	again, ok := deadMark(t, w, "200")
	if !ok || !again.At.After(first.At.Add(time.Hour)) {
		t.Fatalf("dead mark after the failed retry = %+v, want one written now (the period restarts)", again)
	}
	if got := labelled(t, w, "tgnotify_worker_dead_retries_total", "result", "still_dead"); got != 1 {
		t.Fatalf("dead_retries_total{result=still_dead} = %v, want 1", got)
	}
	env.Publish(note("order:4:accepted", 200, "4"))
	waitCount(t, deadLetters(env), 4, "the next message dead-lettered")
	if got := sends(env); got != 2 {
		t.Fatalf("%d sendMessage calls right after a failed retry, want still 2", got)
	}
	if got := len(env.Events("recipient_dead")); got != 1 {
		t.Fatalf("%d recipient_dead events, want 1: a failed retry does not tell the application again", got)
	}

	env.Emu.Unblock(200)
	clock.Advance(61 * time.Minute)
	env.Publish(note("order:5:accepted", 200, "5"))
	waitDelivered(t, env, 1)
	natstest.WaitFor(t, 10*time.Second, func() bool { _, dead := deadMark(t, w, "200"); return !dead }, "the dead mark deleted")
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events("recipient_revived")) == 1 }, "a recipient_revived event")
	ev := env.Events("recipient_revived")[0]
	if ev.Channel != "telegram" || ev.Recipient != "200" || ev.Reason != delivery.ReasonRetryDelivered || ev.Key != "order:5:accepted" {
		t.Fatalf("recipient_revived event = %+v", ev)
	}
	env.Publish(note("order:6:accepted", 200, "6"))
	waitDelivered(t, env, 2)
	if got := texts(env.Emu.ChatMessages(200)); len(got) != 2 || got[0] != "5" || got[1] != "6" {
		t.Fatalf("chat 200 received %v, want [5 6]", got)
	}
	if got := labelled(t, w, "tgnotify_worker_recipients_revived_total", "via", "send"); got != 1 {
		t.Fatalf("recipients_revived_total{via=send} = %v, want 1", got)
	}
	if got := w.Stats().DeadRecipients; got != 0 {
		t.Fatalf("dead recipients = %d, want 0", got)
	}
}

// TestDeadWithoutRetryStaysDead: by default (dead-retry-after 0) a dead
// chat costs no request however long it has been dead.
func TestDeadWithoutRetryStaysDead(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	clock := &offsetClock{}
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg, Now: clock.Now})
	env.Publish(note("order:1:accepted", 200, "1"))
	waitCount(t, deadLetters(env), 1, "the first message dead-lettered")
	clock.Advance(365 * 24 * time.Hour)
	env.Publish(note("order:2:accepted", 200, "2"))
	waitCount(t, deadLetters(env), 2, "the second message dead-lettered")
	if got := sends(env); got != 1 {
		t.Fatalf("%d sendMessage calls, want 1", got)
	}
}

// TestChangeRecipient: news from the provider marks a chat dead (no request
// for its messages) and revives it; news that changes nothing, repeated
// news and news older than the mark it would undo publish nothing.
func TestChangeRecipient(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	ctx := t.Context()
	at := time.Now().Truncate(time.Second)
	change := func(c delivery.RecipientChange, want bool) {
		t.Helper()
		got, err := w.ChangeRecipient(ctx, c)
		if err != nil || got != want {
			t.Fatalf("ChangeRecipient(%+v) = %v, %v; want %v", c, got, err, want)
		}
	}
	change(delivery.RecipientChange{Recipient: "300", Dead: true, Reason: "blocked", Code: 403, Description: "my_chat_member: kicked", At: at, ID: "u1"}, true)
	change(delivery.RecipientChange{Recipient: "300", Dead: true, Reason: "blocked", At: at, ID: "u2"}, false)
	d, ok := deadMark(t, w, "300")
	if !ok || d.Via != delivery.ViaUpdate || d.Reason != "blocked" || !d.At.Equal(at) {
		t.Fatalf("dead mark = %+v, %v; want blocked via update at %v", d, ok, at)
	}
	env.Publish(note("order:1:accepted", 300, "1"))
	waitCount(t, deadLetters(env), 1, "the message to the dead chat dead-lettered")
	if got := sends(env); got != 0 {
		t.Fatalf("%d sendMessage calls to a chat marked dead by an update, want 0", got)
	}

	change(delivery.RecipientChange{Recipient: "300", Reason: "unblocked", At: at.Add(-time.Minute), ID: "u0"}, false) // older than the mark
	change(delivery.RecipientChange{Recipient: "300", Reason: "unblocked", At: at.Add(time.Second), ID: "u3"}, true)
	change(delivery.RecipientChange{Recipient: "300", Reason: "start", At: at.Add(2 * time.Second), ID: "u4"}, false)
	change(delivery.RecipientChange{Recipient: "300", Reason: "unblocked", At: at.Add(time.Second), ID: "u3"}, false)
	env.Publish(note("order:2:accepted", 300, "2"))
	waitDelivered(t, env, 1)

	if got := env.Events("recipient_dead"); len(got) != 1 || got[0].Recipient != "300" || got[0].Reason != "blocked" {
		t.Fatalf("recipient_dead events = %+v, want one for 300", got)
	}
	if got := env.Events("recipient_revived"); len(got) != 1 || got[0].Recipient != "300" || got[0].Reason != "unblocked" {
		t.Fatalf("recipient_revived events = %+v, want one for 300", got)
	}
	if _, err := w.ChangeRecipient(ctx, delivery.RecipientChange{Recipient: "300"}); !errors.Is(err, delivery.ErrInvalidChange) {
		t.Fatalf("a change without an id: %v, want ErrInvalidChange", err)
	}
}
