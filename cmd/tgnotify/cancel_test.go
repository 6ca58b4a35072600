package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// tgnotify cancel: a pending outbox row is cancelled in the outbox and in
// NATS (exit 0); a delivered notification is too late (exit 3, with the
// channel that delivered it).
func TestCancelCommand(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	env.StartWorker(testenv.WorkerOptions{Telegram: telegram.Config{BotRate: 300, ChatRate: 20, GroupPerMinute: 1200}})
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := outbox.Enqueue(ctx, db, notify.Notification{Key: "order:P1:accepted", ChatID: 100, Text: "Order P1 accepted"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"NATS_URL": env.NATS.URL()}

	code, stdout, stderr := run(t, vars, "cancel", "-db", path, "order:P1:accepted")
	if code != 0 || !strings.Contains(stdout, "outbox: cancelled before it was published") || !strings.Contains(stdout, "cancelled: order:P1:accepted will not be sent") {
		t.Fatalf("cancel of a pending row: exit %d\n%s%s", code, stdout, stderr)
	}
	if got, err := outbox.NewReader(db).Pending(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("pending rows after the cancel: %d, %v; want none", len(got), err)
	}
	code, stdout, _ = run(t, vars, "cancel", "order:P1:accepted")
	if code != 0 || !strings.Contains(stdout, "was cancelled before, by tgnotify cancel") {
		t.Fatalf("second cancel: exit %d\n%s", code, stdout)
	}

	env.Publish(notify.Notification{Key: "order:P2:accepted", ChatID: 100, Text: "Order P2 accepted"})
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 1 }, "order:P2 delivered")
	code, _, stderr = run(t, vars, "cancel", "order:P2:accepted")
	if code != exitTooLate || !strings.Contains(stderr, "too late: order:P2:accepted was delivered by telegram to 100") {
		t.Fatalf("cancel of a delivered one: exit %d, want %d\n%s", code, exitTooLate, stderr)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventCancelTooLate)) == 1 }, "the cancel_too_late event")
	if n := len(env.Emu.ChatMessages(100)); n != 1 {
		t.Fatalf("chat 100 got %d messages, want 1", n)
	}
}
