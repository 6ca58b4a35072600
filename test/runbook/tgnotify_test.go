package runbook_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestRunbookTgnotifyCommands runs the runbook's bin/tgnotify blocks, as
// written, against a live server, a real worker and the emulator, and checks
// that tgnotify's replays and the script's are one and the same.
func TestRunbookTgnotifyCommands(t *testing.T) {
	builtbin.Dir(t, "nats", "tgnotify")
	lim := emulator.DefaultLimits()
	lim.BotRate, lim.BotBurst, lim.ChatRate, lim.ChatBurst, lim.GroupPerMinute, lim.GroupBurst = 300, 300, 20, 3, 1200, 3
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim, Blocked: []int64{200}}})
	sh := newShell(t, env.NATS.URL())
	w := env.StartWorker(testenv.WorkerOptions{
		Telegram: telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200},
		Config:   delivery.Config{MaxAttempts: 2, BackoffBase: 20 * time.Millisecond, BackoffCap: 100 * time.Millisecond, BreakerFailures: 1000},
	})

	// The application's database holds R1, published.
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "shop.db")
	db, err := outbox.Open(ctx, dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r1 := notify.Notification{Key: "order:R1:accepted", ChatID: 100, Text: "order R1 accepted", CreatedAt: time.Now().UTC()}
	if _, err := outbox.Enqueue(ctx, db, r1); err != nil {
		t.Fatal(err)
	}
	if err := outbox.NewReader(db).MarkPublished(ctx, time.Now(), 1); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// An outage dead-letters R1 and R2 as max_attempts; R3's chat blocked
	// the bot; a poison message.
	if err := env.Emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	r2 := notify.Notification{Key: "order:R2:accepted", ChatID: 101, Text: "order R2 accepted"}
	env.Publish(r1)
	env.Publish(r2)
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.DeadLetters()) == 2 }, "two max_attempts dead letters")
	env.Emu.StopOutage()
	r3 := notify.Notification{Key: "order:R3:accepted", ChatID: 200, Text: "order R3 accepted"}
	env.Publish(r3)
	env.PublishRaw("notify.telegram.300", []byte("not a notification"), nats.Header{})
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(env.DeadLetters()) == 4 }, "blocked and poison dead letters")
	natstest.WaitFor(t, 10*time.Second, func() bool { return drained(t, env) }, "the worker to ack everything")
	byKey, _ := deadSeqs(env)
	seqR1, seqR3 := byKey[r1.Key][0], byKey[r3.Key][0]
	status := []string{"DB=" + dbPath, "KEY=" + r1.Key}

	t.Run("list", func(t *testing.T) {
		out := sh.run(t, "tgnotify-dlq-list", "REASON=max_attempts")
		mustContain(t, "list", out, r1.Key, r2.Key, r3.Key, "\ttelegram\tmax_attempts\t100\t", "\ttelegram\tblocked\t200\t",
			"\ttelegram\tpoison\t300\t", "4 dead letter(s)\n", "2 dead letter(s) (reason max_attempts, since ")
		out = sh.run(t, "tgnotify-dlq-list-chat", "CHAT=200")
		mustContain(t, "list one chat", out, r3.Key, "1 dead letter(s) (channel telegram, recipient 200)")
		mustNotContain(t, "list one chat", out, r1.Key)
	})

	t.Run("show and status of a dead notification", func(t *testing.T) {
		out := sh.run(t, "tgnotify-dlq-show", seqVar(seqR1))
		mustContain(t, "show", out, "Notify-Key: "+r1.Key, "Notify-Reason: max_attempts", "Notify-Original-Subject: notify.telegram.100",
			`"text": "order R1 accepted"`)
		out = sh.run(t, "tgnotify-status", status...)
		mustContain(t, "status", out, r1.Key+": dead", "outbox: row 1, telegram 100", "notify.telegram.100  Nats-Msg-Id "+r1.Key,
			"telegram 100 max_attempts: 502", "dead on telegram: max_attempts")
	})

	t.Run("replays agree with the script's", func(t *testing.T) {
		out := sh.run(t, "tgnotify-dlq-replay-one", seqVar(seqR1))
		mustContain(t, "replay", out, r1.Key+": replayed to notify.telegram.100 as NOTIFY #")
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(100)) == 1 }, "R1 delivered")
		out, err := sh.command("scripts/dead-letters.sh", "replay", seqVar(seqR1)[len("SEQ="):])
		if err != nil {
			t.Fatalf("the script after tgnotify's replay: %v\n%s", err, out)
		}
		mustContain(t, "the script after tgnotify's replay", out, "already replayed")

		before := notifications(t, env)
		out = sh.run(t, "tgnotify-dlq-replay-reason", "REASON=max_attempts")
		mustContain(t, "replay a reason", out, r1.Key+": already replayed", r2.Key+": replayed to notify.telegram.101")
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(101)) == 1 }, "R2 delivered")
		if after := notifications(t, env); after != before+1 {
			t.Errorf("replaying the reason stored %d notifications, want 1 (R2)", after-before)
		}
		out, err = sh.command("scripts/dead-letters.sh", "replay-reason", "max_attempts")
		if err != nil {
			t.Fatalf("the script's replay-reason: %v\n%s", err, out)
		}
		mustNotContain(t, "the script's replay-reason after tgnotify's", out, "replayed to")

		out = sh.run(t, "tgnotify-status", status...)
		mustContain(t, "status after the replay", out, r1.Key+": delivered", "Nats-Msg-Id "+r1.Key+":replay:"+seqVar(seqR1)[len("SEQ="):])
	})

	t.Run("revive a chat, replay by script, then by tgnotify", func(t *testing.T) {
		env.Emu.Unblock(200)
		out := sh.run(t, "tgnotify-chat-revive", "CHAT=200")
		mustContain(t, "revive", out, "telegram recipient 200 revived", "blocked", r3.Key)
		natstest.WaitFor(t, 10*time.Second, func() bool { return w.Stats().DeadRecipients == 0 }, "the worker to forget the dead chat")
		out, err := sh.command("scripts/dead-letters.sh", "replay", seqVar(seqR3)[len("SEQ="):])
		if err != nil || !strings.Contains(out, "replayed to notify.telegram.200") {
			t.Fatalf("the script's replay of R3: %v\n%s", err, out)
		}
		natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Emu.ChatMessages(200)) == 1 }, "R3 delivered")
		out = sh.run(t, "tgnotify-dlq-replay-one", seqVar(seqR3))
		mustContain(t, "tgnotify after the script's replay", out, r3.Key+": already replayed")
	})

	t.Run("cancel a pending notification", func(t *testing.T) {
		db, err := outbox.Open(ctx, dbPath, outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r4 := notify.Notification{Key: "order:R4:accepted", ChatID: 100, Text: "order R4 accepted"}
		if _, err := outbox.Enqueue(ctx, db, r4); err != nil {
			t.Fatal(err)
		}
		db.Close()
		out := sh.run(t, "tgnotify-cancel", "DB="+dbPath, "KEY="+r4.Key)
		mustContain(t, "cancel", out, "outbox: cancelled before it was published", "cancelled: "+r4.Key+" will not be sent")
		out = sh.run(t, "tgnotify-status", "DB="+dbPath, "KEY="+r4.Key)
		mustContain(t, "status of the cancelled one", out, r4.Key+": cancelled", "cancelled: by tgnotify cancel")
	})

	t.Run("purge", func(t *testing.T) {
		out := sh.run(t, "tgnotify-dlq-purge", "REASON=max_attempts")
		mustContain(t, "purge", out, "would purge 2 dead letter(s) on dead.notify.*.max_attempts.*; nothing was deleted",
			"purged 2 dead letter(s) on dead.notify.*.max_attempts.*")
		if byKey, _ := deadSeqs(env); len(byKey[r1.Key]) != 0 || len(byKey[r2.Key]) != 0 || len(byKey[r3.Key]) != 1 {
			t.Errorf("dead letters left by key: %v, want only R3's", byKey)
		}
	})

	natstest.WaitFor(t, 10*time.Second, func() bool { return drained(t, env) }, "the worker to ack everything")
	if got := env.Emu.Stats().Delivered; got != 3 {
		t.Errorf("%d messages delivered in all, want 3 (R1, R2, R3 once each)", got)
	}
	sh.checkAllRan(t, func(name string) bool { return strings.HasPrefix(name, tgnotifyBlock) })
}
