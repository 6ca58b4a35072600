package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/intake"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// logBuffer is a log sink safe for concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// bundle is NATS, the emulator and a telegram worker, the intake's
// Recipients.
type bundle struct {
	env *testenv.Env
	w   *testenv.Worker
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	w := env.StartWorker(testenv.WorkerOptions{Config: delivery.Config{BackoffBase: 50 * time.Millisecond, BackoffCap: 500 * time.Millisecond}})
	return &bundle{env: env, w: w}
}

// client is a Bot API client for the emulator whose long polls outlast the
// tests' short poll timeouts.
func (b *bundle) client(t *testing.T) *botapi.Client {
	t.Helper()
	c, err := botapi.New(testenv.Token, botapi.WithBaseURL(b.env.BotURL), botapi.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// chats opens notify_chats on a connection of its own, so that a test can
// cut one poller off NATS.
func (b *bundle) chats(t *testing.T) (*nats.Conn, natsjs.KeyValue) {
	t.Helper()
	nc, js := b.env.NATS.Connect(t)
	kv, err := js.KeyValue(t.Context(), jetstream.BucketChats)
	if err != nil {
		t.Fatal(err)
	}
	return nc, kv
}

// running is an intake (poller or webhook) running until stop.
type running struct {
	reg    *prometheus.Registry
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("intake returned %v, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("intake did not stop")
		}
	})
}

func (r *running) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

func logger(t *testing.T, buf *logBuffer) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(&teeWriter{buf, t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type teeWriter struct {
	buf *logBuffer
	t   *testing.T
}

func (w *teeWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return w.buf.Write(p)
}

// poll starts a poller.
func (b *bundle) poll(t *testing.T, bot intake.Bot, kv natsjs.KeyValue, cfg intake.PollConfig) *running {
	t.Helper()
	r := &running{reg: prometheus.NewRegistry(), logs: &logBuffer{}, done: make(chan error, 1)}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	p, err := intake.NewPoller(cfg, intake.PollerDeps{Bot: bot, Chats: kv, Recipients: b.w, Logger: logger(t, r.logs), Registry: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// deadMark reads a chat's dead mark.
func (b *bundle) deadMark(t *testing.T, chat int64) (delivery.DeadRecipient, bool) {
	t.Helper()
	e, err := b.w.Resources.Chats.Get(context.Background(), delivery.DeadRecipientKey("telegram", itoa(chat)))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return delivery.DeadRecipient{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var d delivery.DeadRecipient
	_ = json.Unmarshal(e.Value(), &d)
	return d, true
}

func (b *bundle) waitDead(t *testing.T, chat int64, dead bool) delivery.DeadRecipient {
	t.Helper()
	var d delivery.DeadRecipient
	natstest.WaitFor(t, 10*time.Second, func() bool {
		var ok bool
		d, ok = b.deadMark(t, chat)
		return ok == dead
	}, fmt.Sprintf("chat %d dead=%v", chat, dead))
	return d
}

func (b *bundle) order(chat int64, id string) {
	b.env.Publish(notify.Notification{Key: "order:" + id + ":accepted", ChatID: chat, Text: "order " + id})
}

func (b *bundle) delivered(t *testing.T, chat int64, n int) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.env.Emu.ChatMessages(chat)) == n }, fmt.Sprintf("%d messages in chat %d", n, chat))
}

func (b *bundle) sends() int64 { return b.env.Emu.Stats().ByMethod["sendMessage"] }

// eventsFor returns the recipient events of kind (recipient_dead,
// recipient_revived) for chat.
func (b *bundle) eventsFor(kind string, chat int64) []delivery.Event {
	var out []delivery.Event
	for _, ev := range b.env.Events(kind) {
		if ev.Recipient == itoa(chat) {
			out = append(out, ev)
		}
	}
	return out
}

// TestPollerBlockedUnblockedStart: a user blocks the bot — the
// my_chat_member update marks the chat dead (reason blocked, an event) and
// the next order to it costs no request; the user unblocks it — the chat is
// revived (an event) and the next order is delivered. A chat found dead by
// a send (a temporary 403, which brings no update) is revived by /start.
// Other messages are taken and ignored.
func TestPollerBlockedUnblockedStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, kv := b.chats(t)
	r := b.poll(t, b.client(t), kv, intake.PollConfig{})

	b.order(200, "1")
	b.delivered(t, 200, 1)
	if _, err := b.env.Emu.BlockByUser(200); err != nil {
		t.Fatal(err)
	}
	d := b.waitDead(t, 200, true)
	if d.Reason != "blocked" || d.Via != delivery.ViaUpdate || d.Code != 403 {
		t.Fatalf("dead mark = %+v, want blocked via update", d)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.eventsFor("recipient_dead", 200)) == 1 }, "a recipient_dead event")
	before := b.sends()
	b.order(200, "2")
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.env.DeadLetters()) == 1 }, "the order to the blocked chat dead-lettered")
	if got := b.sends(); got != before {
		t.Fatalf("%d sendMessage calls after the chat was marked dead by the update, want %d", got, before)
	}

	if _, err := b.env.Emu.UnblockByUser(200); err != nil {
		t.Fatal(err)
	}
	b.waitDead(t, 200, false)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.eventsFor("recipient_revived", 200)) == 1 }, "a recipient_revived event")
	if ev := b.eventsFor("recipient_revived", 200)[0]; ev.Reason != intake.ReasonUnblocked || ev.Channel != "telegram" {
		t.Fatalf("recipient_revived event = %+v", ev)
	}
	b.order(200, "3")
	b.delivered(t, 200, 2)

	// A temporary 403 brings no update; /start revives the chat.
	if err := b.env.Emu.SetChatState(201, emulator.ChatForbidden); err != nil {
		t.Fatal(err)
	}
	b.order(201, "4")
	if d := b.waitDead(t, 201, true); d.Reason != "cant_send" || d.Via != "" {
		t.Fatalf("dead mark = %+v, want cant_send from a send", d)
	}
	if err := b.env.Emu.SetChatState(201, emulator.ChatOK); err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.Emu.UserMessage(201, 0, "hello"); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.env.Emu.SendStart(201, 0, ""); err != nil || len(ids) != 1 {
		t.Fatalf("SendStart = %v, %v; want the /start message only", ids, err)
	}
	b.waitDead(t, 201, false)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.eventsFor("recipient_revived", 201)) == 1 }, "chat 201 revived")
	if ev := b.eventsFor("recipient_revived", 201)[0]; ev.Reason != intake.ReasonStart {
		t.Fatalf("recipient_revived event = %+v, want reason start", ev)
	}
	b.order(201, "5")
	b.delivered(t, 201, 1)

	natstest.WaitFor(t, 10*time.Second, func() bool { return b.env.Emu.Updates().Pending == 0 }, "every update confirmed")
	if got := r.metric(t, "tgnotify_intake_updates_total", "kind", "other", "result", "ignored"); got != 1 {
		t.Errorf("ignored updates = %v, want 1 (hello)", got)
	}
	if got := r.metric(t, "tgnotify_intake_updates_total"); got != 4 {
		t.Errorf("updates taken = %v, want 4", got)
	}
	if got := r.metric(t, "tgnotify_intake_polling"); got != 1 {
		t.Errorf("polling gauge = %v, want 1", got)
	}
}

// pausingBot forwards getUpdates to the emulator, except the pauseAt-th
// call, which never reaches it: the poller is stopped there, before it
// confirmed what it applied.
type pausingBot struct {
	*botapi.Client
	calls   atomic.Int32
	pauseAt int32
	paused  chan struct{}
}

func (p *pausingBot) GetUpdates(ctx context.Context, params botapi.GetUpdatesParams) ([]botapi.Update, error) {
	if p.calls.Add(1) == p.pauseAt {
		close(p.paused)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return p.Client.GetUpdates(ctx, params)
}

// TestOffsetSurvivesARestart: a poller applies three updates and is stopped
// before its next getUpdates, so Telegram has not been told they were
// processed; two more arrive while no worker polls. The next poller starts
// from the stored offset: it applies the two new ones only — none lost,
// none applied twice. It takes the lease at once: the first one released
// it.
func TestOffsetSurvivesARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, kv := b.chats(t)
	for _, chat := range []int64{301, 302, 303} {
		if _, err := b.env.Emu.BlockByUser(chat); err != nil {
			t.Fatal(err)
		}
	}
	bot := &pausingBot{Client: b.client(t), pauseAt: 2, paused: make(chan struct{})}
	first := b.poll(t, bot, kv, intake.PollConfig{})
	select {
	case <-bot.paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the first poller did not finish its first batch")
	}
	first.stop(t)
	if got := first.metric(t, "tgnotify_intake_updates_total", "result", "dead"); got != 3 {
		t.Fatalf("the first poller applied %v updates, want 3", got)
	}
	if info := b.env.Emu.Updates(); info.Pending != 3 {
		t.Fatalf("pending at Telegram = %d, want the 3 applied ones, never confirmed", info.Pending)
	}

	if _, err := b.env.Emu.UnblockByUser(301); err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.Emu.BlockByUser(304); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second := b.poll(t, b.client(t), kv, intake.PollConfig{})
	b.waitDead(t, 301, false)
	b.waitDead(t, 304, true)
	if took := time.Since(start); took > intake.DefaultLeaseTTL/2 {
		t.Errorf("the second poller took %v to start: the first did not release the lease", took)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return b.env.Emu.Updates().Pending == 0 }, "every update confirmed")
	if got := second.metric(t, "tgnotify_intake_updates_total"); got != 2 {
		t.Fatalf("the second poller took %v updates, want the 2 new ones", got)
	}
	for _, chat := range []int64{302, 303} {
		b.waitDead(t, chat, true)
	}
	if dead, revived := len(b.env.Events("recipient_dead")), len(b.env.Events("recipient_revived")); dead != 4 || revived != 1 {
		t.Fatalf("%d recipient_dead and %d recipient_revived events, want 4 and 1", dead, revived)
	}
}

// TestStandbyDoesNotPoll: two workers run the intake on one bot. Only the
// one holding the lease polls: Telegram never sees two getUpdates at once
// (no 409) and every update is applied once. The poller is then cut off
// NATS: it cannot renew its lease, stops polling, and the standby takes
// over once the lease has not been renewed for its TTL — still without an
// overlap — and applies what comes next.
func TestStandbyDoesNotPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = time.Second
	ncA, kvA := b.chats(t)
	ncB, kvB := b.chats(t)
	a := b.poll(t, b.client(t), kvA, intake.PollConfig{LeaseTTL: ttl, Owner: "a"})
	c := b.poll(t, b.client(t), kvB, intake.PollConfig{LeaseTTL: ttl, Owner: "b"})
	natstest.WaitFor(t, 10*time.Second, func() bool {
		return a.metric(t, "tgnotify_intake_polling")+c.metric(t, "tgnotify_intake_polling") == 1
	}, "one poller")
	active, standby, activeNC := a, c, ncA
	if c.metric(t, "tgnotify_intake_polling") == 1 {
		active, standby, activeNC = c, a, ncB
	}
	for chat := int64(400); chat < 410; chat++ {
		if _, err := b.env.Emu.BlockByUser(chat); err != nil {
			t.Fatal(err)
		}
	}
	for chat := int64(400); chat < 410; chat++ {
		b.waitDead(t, chat, true)
	}
	// Confirmed by the next poll, which comes after the offset is stored.
	natstest.WaitFor(t, 10*time.Second, func() bool { return b.env.Emu.Updates().Pending == 0 }, "every update confirmed")
	// Several lease renewals pass: the standby keeps still.
	natstest.WaitFor(t, 10*time.Second, func() bool { return b.env.Emu.Updates().Polls >= 4 }, "a few polls")
	if got := standby.metric(t, "tgnotify_intake_updates_total") + standby.metric(t, "tgnotify_intake_polling"); got != 0 {
		t.Fatalf("the standby polled or applied %v updates", got)
	}

	activeNC.Close()
	natstest.WaitFor(t, 10*time.Second, func() bool { return active.metric(t, "tgnotify_intake_polling") == 0 }, "the cut-off poller to stop")
	natstest.WaitFor(t, 10*time.Second, func() bool { return standby.metric(t, "tgnotify_intake_polling") == 1 }, "the standby to take over")
	if _, err := b.env.Emu.UnblockByUser(400); err != nil {
		t.Fatal(err)
	}
	b.waitDead(t, 400, false)
	natstest.WaitFor(t, 10*time.Second, func() bool { return b.env.Emu.Updates().Pending == 0 }, "the update confirmed")
	if got := standby.metric(t, "tgnotify_intake_updates_total"); got != 1 {
		t.Fatalf("the new poller applied %v updates, want 1 (the old ones were confirmed)", got)
	}
	if total := active.metric(t, "tgnotify_intake_updates_total") + standby.metric(t, "tgnotify_intake_updates_total"); total != 11 {
		t.Fatalf("%v updates applied in all, want 11: each once", total)
	}
	if info := b.env.Emu.Updates(); info.MaxConcurrentPolls != 1 || info.Conflicts != 0 {
		t.Fatalf("Telegram saw %d polls at once and %d conflicts, want 1 and 0", info.MaxConcurrentPolls, info.Conflicts)
	}
	if !strings.Contains(standby.logs.String(), "took the intake lease from a poller that stopped renewing it") {
		t.Errorf("the standby did not say it took over:\n%s", standby.logs)
	}
}

// TestPollerExplainsAWebhookConflict: with a webhook set on the bot,
// getUpdates answers 409; the poller says why and what to do, sets the
// conflict gauge, and resumes once the webhook is deleted.
func TestPollerExplainsAWebhookConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, kv := b.chats(t)
	bot := b.client(t)
	if err := bot.SetWebhook(t.Context(), botapi.SetWebhookParams{URL: "http://127.0.0.1:1/elsewhere"}); err != nil {
		t.Fatal(err)
	}
	r := b.poll(t, bot, kv, intake.PollConfig{ConflictRetry: 200 * time.Millisecond})
	natstest.WaitFor(t, 10*time.Second, func() bool { return r.metric(t, "tgnotify_intake_conflict") == 1 }, "the conflict gauge")
	if log := r.logs.String(); !strings.Contains(log, "a webhook is set on this bot") || !strings.Contains(log, "deleteWebhook") {
		t.Fatalf("the poller did not explain the conflict:\n%s", log)
	}
	if _, err := b.env.Emu.BlockByUser(500); err != nil {
		t.Fatal(err)
	}
	if err := bot.DeleteWebhook(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	b.waitDead(t, 500, true)
	natstest.WaitFor(t, 10*time.Second, func() bool { return r.metric(t, "tgnotify_intake_conflict") == 0 }, "the conflict over")
	if !strings.Contains(r.logs.String(), "the conflict is over") {
		t.Errorf("no line says the conflict is over")
	}
}
