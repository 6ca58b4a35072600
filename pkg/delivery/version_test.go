package delivery_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// A payload of a version this worker does not read — written by a newer
// application for a newer worker, with content this one would drop — is
// dead-lettered as poison with a description naming the version, and
// nothing is sent; the worker goes on with the next message. So is a
// payload that hides rich fields under an older version.
func TestNewerPayloadVersionIsPoison(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})

	next := notify.PayloadVersion + 1
	vnext := `{"v":` + strconv.Itoa(next) + `,"key":"order:N1:accepted","chat_id":100,"text":"Order N1 accepted",` +
		`"buttons":[[{"text":"Track","url":"https://shop.example/N1"}]],"carousel":[{"photo":"https://shop.example/1.jpg"}],` +
		`"created_at":"2026-01-01T00:00:00Z"}`
	hdr := nats.Header{}
	hdr.Set(jetstream.HeaderKey, "order:N1:accepted")
	hdr.Set(nats.MsgIdHdr, "order:N1:accepted")
	env.PublishRaw("notify.telegram.100", []byte(vnext), hdr)
	hidden := `{"v":2,"key":"order:N2:accepted","chat_id":100,"text":"Order N2 accepted",` +
		`"buttons":[[{"text":"Track","url":"https://shop.example/N2"}]],"created_at":"2026-01-01T00:00:00Z"}`
	env.PublishRaw("notify.telegram.100", []byte(hidden), nil)
	// The same chat: poison holds nothing of its recipient back, not even
	// during the worker's start-up takeover (see takeover.go).
	env.Publish(note("order:N3:accepted", 100, "Order N3 accepted"))

	waitDelivered(t, env, 1)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.DeadLetters()) == 2 }, "two poison dead letters")
	dead := env.DeadLetters()
	for i, want := range []string{"unsupported payload version " + strconv.Itoa(next), "need version 3"} {
		h := dead[i].Header
		if r := h.Get(jetstream.HeaderReason); r != delivery.ReasonPoison {
			t.Errorf("dead letter %d: reason %q, want %q", i, r, delivery.ReasonPoison)
		}
		if d := h.Get(jetstream.HeaderErrorDescription); !strings.Contains(d, want) {
			t.Errorf("dead letter %d: description %q, want it to say %q", i, d, want)
		}
		if s := dead[i].Subject; s != "dead.notify.telegram.poison.100" {
			t.Errorf("dead letter %d on %s, want dead.notify.telegram.poison.100", i, s)
		}
	}
	if k := dead[0].Header.Get(jetstream.HeaderKey); k != "order:N1:accepted" {
		t.Errorf("dead letter of the newer payload has key %q, want order:N1:accepted", k)
	}
	if got := texts(env.Emu.ChatMessages(100)); len(got) != 1 || got[0] != "Order N3 accepted" {
		t.Fatalf("chat 100 received %q, want the valid notification", got)
	}
	// The application hears that the notification it can name is dead.
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDead)) == 1 }, "one dead event")
	if ev := env.Events(delivery.EventDead)[0]; ev.Key != "order:N1:accepted" || ev.Reason != delivery.ReasonPoison {
		t.Errorf("dead event %+v, want order:N1:accepted with reason %s", ev, delivery.ReasonPoison)
	}
	if got := env.Emu.Stats().Requests; got != 1 {
		t.Fatalf("%d Bot API requests, want 1: the poison costs none", got)
	}
	if s := w.Stats(); s.DeadLetters != 2 {
		t.Fatalf("worker counted %d dead letters, want 2", s.DeadLetters)
	}
}
