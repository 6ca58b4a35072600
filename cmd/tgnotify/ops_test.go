package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// emailChannel is an email channel that delivers everything, standing in
// for SMTP: the fallback tests need a second channel that answers.
type emailChannel struct {
	mu   sync.Mutex
	sent []string
}

func (c *emailChannel) Name() string { return "email" }
func (c *emailChannel) Limits() delivery.Limits {
	return delivery.Limits{Rate: 1000, RecipientRate: func(string) rate.Limit { return 1000 }}
}
func (c *emailChannel) Recipient(n notify.Notification) (string, error) {
	return n.Recipient(notify.ChannelEmail)
}
func (c *emailChannel) Probe(context.Context) error { return nil }
func (c *emailChannel) Send(_ context.Context, a *delivery.Attempt) delivery.Outcome {
	if err := a.Admit(); err != nil {
		return delivery.Outcome{Kind: delivery.NotSent}
	}
	c.mu.Lock()
	c.sent = append(c.sent, a.Notification.Key)
	c.mu.Unlock()
	return delivery.Outcome{Kind: delivery.Delivered, ProviderID: "mail-" + a.Notification.Key}
}

// pipeline is embedded NATS, the Bot API emulator with blocked chats 200
// and 300, a telegram worker, an email worker, and what they made of a
// handful of notifications.
type pipeline struct {
	env    *testenv.Env
	tg     *testenv.Worker
	email  *emailChannel
	db     string
	envVar map[string]string
	seqs   map[string][]uint64 // dead letters by key ("" for the poison one)
}

// Keys of the pipeline's notifications.
const (
	keyDelivered = "order:D:accepted"  // chat 100, delivered; also in the outbox, published
	keyFallback  = "order:F:accepted"  // chat 200 (blocked), then email: delivered by email
	keyDead      = "order:X:accepted"  // chat 300 (blocked), Telegram only: dead
	keyOutbox    = "order:P:accepted"  // in the outbox only, not published
	keyStream    = "order:Q:accepted"  // SMS only, in NOTIFY, no SMS worker: waiting
	keyMax1      = "order:M1:accepted" // chat 101, max_attempts during an outage
	keyMax2      = "order:M2:accepted" // chat 102, max_attempts during an outage
	emailF       = "fiona@example.com"
)

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	lim := emulator.DefaultLimits()
	lim.BotRate, lim.BotBurst, lim.ChatRate, lim.ChatBurst, lim.GroupPerMinute, lim.GroupBurst = 300, 300, 20, 3, 1200, 3
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200, 300}}})
	cfg := delivery.Config{MaxAttempts: 2, BackoffBase: 20 * time.Millisecond, BackoffCap: 100 * time.Millisecond, BreakerFailures: 1000}
	p := &pipeline{env: env, email: &emailChannel{}, envVar: map[string]string{"NATS_URL": env.NATS.URL()}}
	p.tg = env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200}})
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Channel: p.email})
	ctx := context.Background()

	// The outbox of the application: D (published), P (pending).
	p.db = t.TempDir() + "/app.db"
	db, err := outbox.Open(ctx, p.db, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	created := time.Now().UTC()
	d := notify.Notification{Key: keyDelivered, ChatID: 100, Text: "D", CreatedAt: created}
	for _, n := range []notify.Notification{d, {Key: keyOutbox, ChatID: 100, Text: "P", CreatedAt: created}} {
		if _, err := outbox.Enqueue(ctx, db, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := outbox.NewReader(db).MarkPublished(ctx, time.Now(), 1); err != nil {
		t.Fatal(err)
	}

	env.Publish(d)
	env.Publish(notify.Notification{Key: keyFallback, ChatID: 200, Email: emailF, Text: "F",
		Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelEmail}})
	env.Publish(notify.Notification{Key: keyDead, ChatID: 300, Text: "X"})
	env.Publish(notify.Notification{Key: keyStream, Phone: "+79991234567", Text: "Q"})
	env.PublishRaw("notify.telegram.400", []byte("not a notification"), nats.Header{})
	natstest.WaitFor(t, 30*time.Second, func() bool {
		return len(env.Emu.ChatMessages(100)) == 1 && len(p.email.keys()) == 1 && len(env.Events(delivery.EventDead)) == 1 &&
			len(env.DeadLetters()) == 3
	}, "D delivered, F delivered by email, X dead, the poison message dead-lettered")

	// An outage: M1 and M2 die as max_attempts.
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	env.Publish(notify.Notification{Key: keyMax1, ChatID: 101, Text: "M1"})
	env.Publish(notify.Notification{Key: keyMax2, ChatID: 102, Text: "M2"})
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.DeadLetters()) == 5 }, "two max_attempts dead letters")
	env.Emu.StopOutage()

	p.seqs = map[string][]uint64{}
	for _, m := range env.DeadLetters() {
		k := m.Header.Get(jetstream.HeaderKey)
		p.seqs[k] = append(p.seqs[k], m.Sequence)
	}
	return p
}

func (c *emailChannel) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...)
}

// run runs tgnotify against the pipeline's NATS.
func (p *pipeline) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr := run(t, p.envVar, args...)
	t.Logf("$ tgnotify %s\n%s%s", strings.Join(args, " "), stdout, stderr)
	return code, stdout, stderr
}

func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

func lacks(t *testing.T, what, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Errorf("%s: output has %q:\n%s", what, w, out)
		}
	}
}

func seqArg(seq uint64) string { return strconv.FormatUint(seq, 10) }

func TestOperatorCommands(t *testing.T) {
	p := newPipeline(t)
	env := p.env
	emailToken, _ := (&notify.Notification{Email: emailF}).Recipient(notify.ChannelEmail)

	t.Run("status of a delivered key, with the outbox", func(t *testing.T) {
		code, out, _ := p.run(t, "status", "-db", p.db, keyDelivered)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "status D", out, keyDelivered+": delivered", "outbox: row 1, telegram 100, created ", ", published ",
			"notify.telegram.100  Nats-Msg-Id "+keyDelivered, "attempts: none failed", "delivered: telegram 100, provider id ",
			"dead letters: 0", "events: 1", "delivered by telegram to 100")
	})
	t.Run("status of a fallen-back key", func(t *testing.T) {
		code, out, _ := p.run(t, "status", keyFallback)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "status F", out, keyFallback+": delivered", "route telegram,email", "NOTIFY: 2 message(s)",
			"notify.telegram.200  Nats-Msg-Id "+keyFallback+"\n",
			"notify.email."+emailToken+"  Nats-Msg-Id "+keyFallback+"/email  fallback from telegram (blocked)",
			"delivered: email "+emailToken+", provider id mail-"+keyFallback,
			"dead letters: 1", "telegram 200 blocked: 403 ", "events: 2", "fallback from telegram to email: blocked 403",
			"delivered by email to "+emailToken)
		lacks(t, "status F", out, "outbox:")
	})
	t.Run("status of a dead key", func(t *testing.T) {
		code, out, _ := p.run(t, "status", keyDead)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "status X", out, keyDead+": dead", "delivered: no delivery record", "dead letters: 1",
			"telegram 300 blocked: 403 ", " dead on telegram: blocked 403")
	})
	t.Run("status of a key pending in the outbox", func(t *testing.T) {
		code, out, _ := p.run(t, "status", "-db", p.db, keyOutbox)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "status P", out, keyOutbox+": pending in the outbox", "outbox: row 2, telegram 100", "pending (not published yet)",
			"NOTIFY: 0 message(s)")
	})
	t.Run("status of a key waiting in NOTIFY", func(t *testing.T) {
		code, out, _ := p.run(t, "status", keyStream)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "status Q", out, keyStream+": in NOTIFY, not delivered yet", "NOTIFY: 1 message(s)", "notify.sms.p", "events: 0")
	})
	t.Run("status of an unknown key", func(t *testing.T) {
		code, out, stderr := p.run(t, "status", "-db", p.db, "order:nobody:accepted")
		if code != 1 || !strings.Contains(stderr, `no trace of "order:nobody:accepted"`) || !strings.Contains(out, ": unknown") {
			t.Fatalf("exit %d, want 1 and no trace", code)
		}
	})

	t.Run("dlq list and its filters", func(t *testing.T) {
		code, out, stderr := p.run(t, "dlq", "list")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "list", out, "SEQ\tDIED_AT\tCHANNEL\tREASON\tRECIPIENT\tKEY\tERROR\n", "\ttelegram\tblocked\t200\t"+keyFallback+"\t403 ",
			"\ttelegram\tblocked\t300\t"+keyDead+"\t403 ", "\ttelegram\tmax_attempts\t101\t"+keyMax1+"\t502 ", "\ttelegram\tpoison\t400\t-\t")
		contains(t, "list count", stderr, "5 dead letter(s)\n")

		for _, tc := range []struct {
			args        []string
			want, avoid []string
			count       string
		}{
			{[]string{"-reason", "blocked"}, []string{keyFallback, keyDead}, []string{keyMax1, "poison"}, "2 dead letter(s) (reason blocked)"},
			{[]string{"-channel", "telegram", "-recipient", "300"}, []string{keyDead}, []string{keyFallback, keyMax1}, "1 dead letter(s)"},
			{[]string{"-key", keyMax2}, []string{keyMax2}, []string{keyMax1, keyDead}, "1 dead letter(s) (key " + keyMax2 + ")"},
			{[]string{"-reason", "max_attempts", "-since", "1h"}, []string{keyMax1, keyMax2}, []string{keyDead}, "2 dead letter(s)"},
			{[]string{"-since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil, []string{keyMax1, keyDead}, "0 dead letter(s)"},
			{[]string{"-until", "1h"}, nil, []string{keyMax1, keyDead}, "0 dead letter(s)"},
			{[]string{"-channel", "email"}, nil, []string{keyMax1, keyDead}, "0 dead letter(s)"},
		} {
			code, out, stderr := p.run(t, append([]string{"dlq", "list"}, tc.args...)...)
			if code != 0 {
				t.Errorf("dlq list %v: exit %d", tc.args, code)
			}
			contains(t, strings.Join(tc.args, " "), out, tc.want...)
			lacks(t, strings.Join(tc.args, " "), out, tc.avoid...)
			contains(t, strings.Join(tc.args, " "), stderr, tc.count)
		}
	})

	t.Run("dlq show", func(t *testing.T) {
		code, out, _ := p.run(t, "dlq", "show", seqArg(p.seqs[keyMax1][0]))
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "show", out, "Subject: dead.notify.telegram.max_attempts.101", "Notify-Key: "+keyMax1, "Notify-Reason: max_attempts",
			"Notify-Error-Code: 502", "Notify-Original-Subject: notify.telegram.101", "Notify-Attempts: 2", `"text": "M1"`)
		if code, _, stderr := p.run(t, "dlq", "show", "999999"); code != 1 || !strings.Contains(stderr, "no such dead letter") {
			t.Errorf("show of a missing sequence: exit %d, want 1", code)
		}
	})

	t.Run("dlq replay twice is one replay", func(t *testing.T) {
		code, out, stderr := p.run(t, "dlq", "replay", "-reason", "max_attempts")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "replay", out, keyMax1+": replayed to notify.telegram.101 as NOTIFY #", keyMax2+": replayed to notify.telegram.102")
		contains(t, "replay", stderr, "2 dead letter(s) (reason max_attempts): 2 replayed, 0 already replayed, 0 not replayable, 0 failed")
		natstest.WaitFor(t, 20*time.Second, func() bool {
			return len(env.Emu.ChatMessages(101)) == 1 && len(env.Emu.ChatMessages(102)) == 1
		}, "M1 and M2 delivered after the replay")
		before := storedNotifications(t, env)

		code, out, _ = p.run(t, "dlq", "replay", "-reason", "max_attempts")
		if code != 0 {
			t.Fatalf("second replay: exit %d", code)
		}
		seq := seqArg(p.seqs[keyMax1][0])
		contains(t, "second replay", out, "#"+seq+" "+keyMax1+": already replayed (NOTIFY holds "+keyMax1+":replay:"+seq+" as #")
		lacks(t, "second replay", out, "replayed to")
		if after := storedNotifications(t, env); after != before {
			t.Errorf("the second replay stored %d messages", after-before)
		}
		// By sequence: the same replay id.
		code, out, _ = p.run(t, "dlq", "replay", seq)
		if code != 0 || !strings.Contains(out, "already replayed") {
			t.Errorf("replay %s after the filtered replay: exit %d, want already replayed", seq, code)
		}
		if got := len(env.Emu.ChatMessages(101)); got != 1 {
			t.Errorf("chat 101 got %d messages, want 1", got)
		}
		// The trail shows the replay.
		_, out, _ = p.run(t, "status", keyMax1)
		contains(t, "status of a replayed key", out, keyMax1+": delivered", "Nats-Msg-Id "+keyMax1+":replay:"+seq+"  replay of NOTIFY_DEAD:"+seq)
	})

	t.Run("dlq replay skips poison", func(t *testing.T) {
		poison := seqArg(p.seqs[""][0])
		code, _, stderr := p.run(t, "dlq", "replay", poison)
		if code != 1 || !strings.Contains(stderr, "not replayable") {
			t.Errorf("replay of the poison message by sequence: exit %d, want 1 and not replayable", code)
		}
		code, out, stderr := p.run(t, "dlq", "replay", "-reason", "poison")
		if code != 0 || !strings.Contains(stderr, "1 not replayable") || strings.Contains(out, "replayed to") {
			t.Errorf("replay of reason poison: exit %d, want 0 and the poison message skipped", code)
		}
	})

	t.Run("dlq purge", func(t *testing.T) {
		code, _, stderr := p.run(t, "dlq", "purge")
		if code != 2 || !strings.Contains(stderr, "-all for every one") {
			t.Errorf("purge without a filter: exit %d, want 2", code)
		}
		code, out, _ := p.run(t, "dlq", "purge", "-dry-run", "-reason", "blocked")
		if code != 0 || !strings.Contains(out, "would purge 2 dead letter(s) on dead.notify.*.blocked.*; nothing was deleted") {
			t.Errorf("purge -dry-run: exit %d", code)
		}
		if n := len(env.DeadLetters()); n != 5 {
			t.Fatalf("a dry run left %d dead letters, want 5", n)
		}
		code, out, _ = p.run(t, "dlq", "purge", "-reason", "blocked")
		if code != 0 || !strings.Contains(out, "purged 2 dead letter(s) on dead.notify.*.blocked.*") {
			t.Errorf("purge -reason blocked: exit %d", code)
		}
		code, out, _ = p.run(t, "dlq", "purge", "-key", keyMax1)
		if code != 0 || !strings.Contains(out, " "+keyMax1+": deleted") || !strings.Contains(out, "deleted 1 dead letter(s) (key "+keyMax1+")") {
			t.Errorf("purge -key: exit %d", code)
		}
		left := map[string]bool{}
		for _, m := range env.DeadLetters() {
			left[m.Header.Get(jetstream.HeaderKey)] = true
		}
		if len(left) != 2 || !left[keyMax2] || !left[""] {
			t.Errorf("dead letters left: %v, want M2's and the poison one", left)
		}
		code, out, _ = p.run(t, "dlq", "purge", "-all")
		if code != 0 || !strings.Contains(out, "purged 2 dead letter(s) on dead.>") || len(env.DeadLetters()) != 0 {
			t.Errorf("purge -all: exit %d, %d left", code, len(env.DeadLetters()))
		}
	})

	t.Run("chat revive, then the next message is delivered", func(t *testing.T) {
		natstest.WaitFor(t, 10*time.Second, func() bool { return p.tg.Stats().DeadRecipients == 2 }, "chats 200 and 300 dead")
		env.Emu.Unblock(300) // the customer unblocked the bot
		code, out, _ := p.run(t, "chat", "revive", "300")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		if !regexp.MustCompile(`telegram recipient 300 revived; it was marked dead at \S+: blocked \(403 .+\), found by ` + keyDead).MatchString(out) {
			t.Errorf("revive said %q, want what the mark said", out)
		}
		natstest.WaitFor(t, 10*time.Second, func() bool { return p.tg.Stats().DeadRecipients == 1 }, "the worker to forget chat 300")
		env.Publish(notify.Notification{Key: "order:X2:accepted", ChatID: 300, Text: "X2"})
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(300)) == 1 }, "the next message to chat 300 delivered")

		code, _, stderr := p.run(t, "chat", "revive", "300")
		if code != 1 || !strings.Contains(stderr, "telegram recipient 300 is not marked dead") {
			t.Errorf("reviving a live chat: exit %d, want 1", code)
		}
		code, _, stderr = p.run(t, "chat", "revive", "-channel", "email", "not an address")
		if code != 2 || !strings.Contains(stderr, "not a recipient token") {
			t.Errorf("revive of a bad id: exit %d, want 2", code)
		}
		// An email recipient named by its address maps to its token.
		code, _, stderr = p.run(t, "chat", "revive", "-channel", "email", emailF)
		if code != 1 || !strings.Contains(stderr, "email recipient "+emailToken+" is not marked dead") {
			t.Errorf("revive -channel email %s: exit %d, want 1 naming %s", emailF, code, emailToken)
		}
	})
}

// storedNotifications counts the Telegram notifications in NOTIFY.
func storedNotifications(t *testing.T, env *testenv.Env) uint64 {
	t.Helper()
	st, err := env.JS.Stream(context.Background(), jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), natsjs.WithSubjectFilter(jetstream.TelegramFilter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}
