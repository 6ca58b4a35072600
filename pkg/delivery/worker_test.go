package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

func note(key string, chat int64, text string) notify.Notification {
	return notify.Notification{Key: key, ChatID: chat, Text: text}
}

// fastLimits are Telegram's limits scaled up so tests run in seconds; the
// worker's own limits match them.
func fastLimits() (emulator.Limits, delivery.Config, telegram.Config) {
	l := emulator.DefaultLimits()
	l.BotRate, l.BotBurst, l.ChatRate, l.ChatBurst, l.GroupPerMinute, l.GroupBurst = 300, 300, 20, 3, 1200, 3
	return l, delivery.Config{BackoffBase: 50 * time.Millisecond, BackoffCap: 500 * time.Millisecond}, telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200}
}

func texts(ms []emulator.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}

// checkPauses checks what the emulator saw of the 429 pauses against what
// the workers counted: every request the emulator decided inside a pause
// was admitted before a worker read the 429 (Crossing429), whatever the
// scheduling delays of a busy machine; none started after. The emulator's
// arrival clock cannot tell the two apart on its own: a request admitted
// just before the 429 was read may arrive well after it on a starved
// process.
func checkPauses(t *testing.T, env *testenv.Env, workers ...*testenv.Worker) {
	t.Helper()
	st := env.Emu.Stats()
	var crossing, limited int64
	for _, w := range workers {
		s := w.Stats()
		crossing += s.Crossing429
		limited += s.RateLimited
	}
	if st.InAnyPause > crossing {
		t.Fatalf("the emulator decided %d requests inside a 429 pause, but only %d were admitted before the 429 was read", st.InAnyPause, crossing)
	}
	if st.RateLimited != limited {
		t.Fatalf("the emulator answered %d 429s, the workers counted %d", st.RateLimited, limited)
	}
}

func waitDelivered(t *testing.T, env *testenv.Env, n int64) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() bool { return env.Emu.Stats().Delivered >= n }, fmt.Sprintf("%d messages delivered", n))
}

func TestDeliversEachOnceInOrderPerChat(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	chats := []int64{100, 200, 300, -400}
	const each = 10
	for i := 0; i < each; i++ {
		for _, c := range chats {
			env.Publish(note(fmt.Sprintf("k:%d:%d", c, i), c, fmt.Sprintf("%d", i)))
		}
	}
	waitDelivered(t, env, int64(len(chats)*each))
	for _, c := range chats {
		got := texts(env.Emu.ChatMessages(c))
		want := make([]string, each)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("chat %d received %v, want %v", c, got, want)
		}
	}
	st := env.Emu.Stats()
	if st.RateLimited != 0 || st.Requests != int64(len(chats)*each) {
		t.Errorf("emulator saw %d requests and %d 429s, want %d and 0", st.Requests, st.RateLimited, len(chats)*each)
	}
	natstest.WaitFor(t, 5*time.Second, func() bool { return w.Stats().Sent == int64(len(chats)*each) }, "sent counter")
}

// The seed's scenario: orders to chats 100, 200 and 300; the customer in 200
// blocked the bot. 200's message is dead with Telegram's text, the others
// arrive, and there is no second request to the dead chat: three API calls
// for three messages. A later message to 200 costs no call at all.
func TestBlockedChatIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	for _, c := range []int64{100, 200, 300} {
		env.Publish(note(fmt.Sprintf("order:%d:accepted", c), c, "accepted"))
	}
	waitDelivered(t, env, 2)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.DeadLetters()) == 1 }, "one dead letter")
	if got := env.Emu.Stats().ByMethod["sendMessage"]; got != 3 {
		t.Fatalf("%d sendMessage calls, want exactly 3", got)
	}
	dl := env.DeadLetters()[0]
	h := dl.Header
	if dl.Subject != "dead.notify.telegram.blocked.200" || h.Get(jetstream.HeaderReason) != "blocked" ||
		h.Get(jetstream.HeaderErrorCode) != "403" || h.Get(jetstream.HeaderErrorDescription) != "Forbidden: bot was blocked by the user" ||
		h.Get(jetstream.HeaderKey) != "order:200:accepted" || h.Get(jetstream.HeaderOriginalSubject) != "notify.telegram.200" ||
		h.Get(jetstream.HeaderOriginalSeq) != "2" || h.Get(jetstream.HeaderAttempts) != "1" || h.Get(jetstream.HeaderDeadAt) == "" {
		t.Fatalf("dead letter %s headers %v", dl.Subject, h)
	}
	if _, err := notify.DecodePayload(dl.Data); err != nil {
		t.Fatalf("dead letter body is not the original payload: %v", err)
	}
	if h.Get("Nats-Pin-Id") != "" {
		t.Fatalf("dead letter carries the server's Nats-Pin-Id header")
	}

	// The chat is remembered: the next message to it goes straight to the
	// dead-letter stream.
	env.Publish(note("order:200b:accepted", 200, "again"))
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.DeadLetters()) == 2 }, "second dead letter")
	if got := env.Emu.Stats().ByMethod["sendMessage"]; got != 3 {
		t.Fatalf("%d sendMessage calls after a message to a dead chat, want still 3", got)
	}
	if got := w.Stats().DeadRecipients; got != 1 {
		t.Fatalf("dead chats = %d, want 1", got)
	}
}

// A 429 pauses the whole sender: nothing reaches Telegram until retry_after
// has passed, the message is not charged an attempt, and then everything
// goes.
func TestRateLimitPausesEverySend(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	if err := env.Emu.OpenPause(emulator.PauseRequest{Scope: "bot", RetryAfter: 2}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, c := range []int64{100, 200, 300} {
		env.Publish(note(fmt.Sprintf("order:%d:accepted", c), c, "accepted"))
	}
	waitDelivered(t, env, 3)
	checkPauses(t, env, w)
	// The three sends may all have been on their way when the first 429
	// was read; none was launched after it.
	st, s := env.Emu.Stats(), w.Stats()
	if st.RateLimited < 1 || st.RateLimited > 1+s.Crossing429 {
		t.Fatalf("emulator: %d 429s with %d requests crossing the first; want 1 plus the crossing ones", st.RateLimited, s.Crossing429)
	}
	for _, m := range env.Emu.Messages() {
		if m.Time.Sub(start) < 2*time.Second {
			t.Errorf("message to %d delivered %v after the 429, inside the 2s pause", m.ChatID, m.Time.Sub(start))
		}
	}
	if s := w.Stats(); s.Retries.Level1 != 0 {
		t.Fatalf("worker stats %+v: want no retry charged for a 429", s)
	}
}

// A worker paused at start (its probe was answered with a 429) sends
// nothing before the pause ends, and writes it for the other workers.
func TestPauseUntilHoldsTheFirstSend(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})
	until := time.Now().Add(2 * time.Second)
	w.PauseUntil(until, "429 at start-up")
	env.Publish(note("order:1:accepted", 100, "after the pause"))
	waitDelivered(t, env, 1)
	if sent := env.Emu.ChatMessages(100)[0].Time; sent.Before(until) {
		t.Fatalf("sent at %v, before the pause ended at %v", sent, until)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		_, err := w.Resources.Chats.Get(context.Background(), "pause.bot")
		return err == nil
	}, "the pause written to the shared state")
}
