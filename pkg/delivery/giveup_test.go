package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// doneMarks is a notify_attempts bucket that refuses ("fail") or silently
// drops ("drop") the give-up marks ("done <reason>") while its mode says
// so, and counts the marks refused.
type doneMarks struct {
	natsjs.KeyValue
	mu      sync.Mutex
	mode    string
	refused atomic.Int32
}

func (k *doneMarks) setMode(m string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mode = m
}

func (k *doneMarks) Put(ctx context.Context, key string, v []byte) (uint64, error) {
	k.mu.Lock()
	mode := k.mode
	k.mu.Unlock()
	if strings.HasPrefix(string(v), "done ") {
		switch mode {
		case "fail":
			k.refused.Add(1)
			return 0, errors.New("nats: no response from stream")
		case "drop":
			return 1, nil
		}
	}
	return k.KeyValue.Put(ctx, key, v)
}

// expired is a notification of chat that expired an hour ago: the worker
// gives up on it without a request.
func expired(key string, chat int64) (n notify.Notification) {
	n = note(key, chat, "too late")
	n.CreatedAt = time.Now().Add(-2 * time.Hour)
	n.ExpiresAt = time.Now().Add(-time.Hour)
	return n
}

// The give-up mark is written before the message is terminated, and a
// message is not terminated while the mark cannot be written: a worker
// checking whether a recipient's earlier messages are settled reads the
// mark, and a terminated message without one looked out to it for ever
// (bug 46: CI's short cluster run, a worker SIGKILLed between the
// termination and the mark; the standby's lane waited for the message
// until the run ended).
func TestGiveUpMarkIsStoredBeforeTheTermination(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	marks := &doneMarks{mode: "fail"}
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg,
		WrapAttempts: func(kv natsjs.KeyValue) natsjs.KeyValue { marks.KeyValue = kv; return marks }})
	env.Publish(expired("sale:1", 100))

	natstest.WaitFor(t, 20*time.Second, func() bool { return marks.refused.Load() >= 2 }, "the give-up mark refused, then tried again")
	if n := len(env.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters while the give-up mark could not be written, want none: the message is terminated without its mark", n)
	}
	info, err := w.Resources.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 1 {
		t.Fatalf("%d messages unacknowledged while the mark could not be written, want the one kept", info.NumAckPending)
	}

	marks.setMode("")
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 1 }, "the dead letter once the mark is written")
	e, err := marks.Get(t.Context(), delivery.RecordKey("sale:1"))
	if err != nil {
		t.Fatalf("reading the attempt record: %v", err)
	}
	if !strings.HasPrefix(string(e.Value()), "done ") {
		t.Errorf("attempt record %q, want the give-up mark", e.Value())
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		info, err := w.Resources.Consumer.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, "the message terminated")
}

// A worker checking a hold left by another worker counts the messages below
// the consumer's ack floor as settled, whatever the records say: one
// terminated without its give-up mark (as before bug 46's fix, or lost with
// its bucket) no longer keeps the recipient waiting for ever.
func TestHoldCheckTrustsTheAckFloor(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.AckWait = 2 * time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	marks := &doneMarks{mode: "drop"}
	a := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg,
		WrapAttempts: func(kv natsjs.KeyValue) natsjs.KeyValue { marks.KeyValue = kv; return marks }})
	first := env.Publish(expired("sale:1", 100))
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 1 }, "the expired message given up on")
	natstest.WaitFor(t, 10*time.Second, func() bool {
		info, err := a.Resources.Consumer.Info(t.Context())
		return err == nil && info.AckFloor.Stream >= first
	}, "the ack floor past the terminated message")
	a.Stop(t)

	// The hold a worker leaves when it parks the recipient's messages
	// behind the first one (scheduler.holdChange).
	h, err := json.Marshal(map[string]any{"first": first, "until": time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resources.Chats.Put(t.Context(), "hold.100", h); err != nil {
		t.Fatal(err)
	}
	b := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	env.Publish(note("k:100:1", 100, "after the expired one"))
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.Emu.ChatMessages(100)) == 1 }, "the recipient's next message delivered")
	natstest.WaitFor(t, 5*time.Second, func() bool { return b.Stats().Sent == 1 }, "the second worker counting its send")
}

// A give-up that handed the notification on and then could not store its
// mark or its dead letter finishes when it is tried again, even if the
// next channel has delivered the notification meanwhile: the retry used
// to find the delivery record, ack the message as already delivered, and
// leave the hand-on without its dead letter (CI's short cluster run on
// 1304e17: NOTIFY_DEAD was electing a leader as the dead letter went out).
func TestGiveUpFinishesAfterTheNextChannelDelivered(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.FallbackTransactional = time.Second
	cfg.BreakerOpen = 300 * time.Millisecond
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	marks := &doneMarks{mode: "fail"}
	tw := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg,
		WrapAttempts: func(kv natsjs.KeyValue) natsjs.KeyValue { marks.KeyValue = kv; return marks }})
	sms := &recorder{name: "sms"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: sms})
	const key = "order:5:accepted"
	env.Publish(notify.Notification{Key: key, ChatID: 500, Phone: "+79991234567", Text: "Order accepted",
		Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelSMS}})

	// Handed on, the mark refused; the SMS delivered and its record stored.
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(sms.delivered()) == 1 }, "the SMS")
	natstest.WaitFor(t, 20*time.Second, func() bool {
		e, err := tw.Resources.Delivered.Get(t.Context(), delivery.RecordKey(key))
		return err == nil && strings.Contains(string(e.Value()), delivery.StateDelivered)
	}, "the SMS worker's delivery record")
	// The telegram worker hands on before it writes its mark, so on a busy
	// machine the SMS can be delivered and recorded first.
	natstest.WaitFor(t, 20*time.Second, func() bool { return marks.refused.Load() > 0 },
		"the give-up mark refused (else the test does not reach the case)")
	if n := len(env.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters while the give-up mark could not be written, want none", n)
	}

	marks.setMode("")
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.DeadLetters()) == 1 }, "the telegram dead letter, the give-up finished")
	if dl := env.DeadLetters(); dl[0].Subject != "dead.notify.telegram.fallback_timeout.500" {
		t.Fatalf("dead letter %s, want telegram's fallback_timeout", dl[0].Subject)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		info, err := tw.Resources.Consumer.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, "the message settled")
	if got := sms.delivered(); len(got) != 1 {
		t.Fatalf("SMS sent %d copies, want 1: the hand-on is not repeated", len(got))
	}
	if n := len(env.Events(delivery.EventFallback)); n != 1 {
		t.Fatalf("%d fallback events, want 1: the finished give-up does not tell the application again", n)
	}
}

// replicaBehind stands in for a replica of stream that is behind (a node
// back from a partition, catching up): the stream's own direct gets are
// turned off, and the replica answers every direct get with "no results",
// as a replica without the messages stored meanwhile does. It counts the
// gets it answered.
func replicaBehind(t *testing.T, env *testenv.Env, stream string) *atomic.Int32 {
	t.Helper()
	ctx := t.Context()
	s, err := env.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var answered atomic.Int32
	sub, err := env.NC.Subscribe("$JS.API.DIRECT.GET."+stream, func(m *nats.Msg) {
		answered.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "404")
		r.Header.Set("Description", "No Results")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &answered
}

// A give-up is decided on what notify_delivered's leader holds, not on the
// attempt's batched read, which any replica answers (bug 53, found by the
// long cluster chaos run: a Telegram delivery whose worker was killed right
// after it was handed to email by its successor, whose read came from a
// node catching up after a partition). Here the read says "no record", the
// notification is past its fallback_after, and the leader has Telegram's
// record: the message is acked as delivered, not handed to SMS.
func TestGiveUpIsDecidedOnTheLeadersRecord(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	cfg.FallbackTransactional = time.Second
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	tw := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	sms := &recorder{name: "sms"}
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: sms})

	const key = "order:53:accepted"
	created := time.Now().Add(-time.Minute).UTC()
	rec, err := json.Marshal(delivery.DeliveryRecord{Key: key, Channel: "telegram", Recipient: "530", ProviderID: "77",
		DeliveredAt: created.Add(time.Second), StreamSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Resources.Delivered.Put(t.Context(), delivery.RecordKey(key), rec); err != nil {
		t.Fatal(err)
	}
	behind := replicaBehind(t, env, "KV_"+tw.Resources.Delivered.Bucket())
	env.Publish(notify.Notification{Key: key, ChatID: 530, Phone: "+79991234567", Text: "Order accepted", CreatedAt: created,
		Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelSMS}})

	natstest.WaitFor(t, 20*time.Second, func() bool {
		info, err := tw.Resources.Consumer.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream > 0
	}, "the message settled")
	if behind.Load() == 0 {
		t.Fatal("no direct get was answered by the replica that is behind: the test does not reach the case")
	}
	if n := len(env.Events(delivery.EventFallback)); n != 0 {
		t.Fatalf("%d fallback events: handed on on a read that was behind the leader", n)
	}
	if n := len(env.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters, want none: it was delivered", n)
	}
	if got := sms.delivered(); len(got) != 0 {
		t.Fatalf("SMS sent %d copies of a notification Telegram delivered", len(got))
	}
	if n := len(env.Emu.Messages()); n != 0 {
		t.Fatalf("Telegram sent %d messages, want none", n)
	}
}
