package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func testConfig() *config {
	return &config{orders: 100, customers: 10, repeat: 0.2, seed: 7}
}

func TestPlanOrders(t *testing.T) {
	orders := planOrders(testConfig(), "T1")
	if len(orders) != 100 {
		t.Fatalf("orders: got %d, want 100", len(orders))
	}
	counts := map[string]int{}
	ids := map[string]bool{}
	for _, o := range orders {
		if ids[o.order.ID] {
			t.Errorf("order id %s planned twice", o.order.ID)
		}
		ids[o.order.ID] = true
		if err := o.order.Validate(); err != nil {
			t.Errorf("order %s is invalid: %v", o.order.ID, err)
		}
		switch {
		case o.want == deadLettered:
			counts[o.wantReason]++
		case o.order.ChatID == groupChat:
			counts["group"]++
			if o.wantChat != supergroupChat {
				t.Errorf("group order %s: want chat %d, got %d", o.order.ID, supergroupChat, o.wantChat)
			}
		default:
			counts["private"]++
		}
		if o.repeat != noRepeat {
			counts["repeat"]++
		}
	}
	for _, k := range []string{"blocked", "deactivated", "group", "private", "repeat"} {
		if counts[k] == 0 {
			t.Errorf("no %s order among %v", k, counts)
		}
	}
	if again := planOrders(testConfig(), "T1"); again[42].order.ChatID != orders[42].order.ChatID {
		t.Error("the same seed planned different orders")
	}
}

func TestPlanOrdersRealTelegram(t *testing.T) {
	c := testConfig()
	c.orders = 5
	c.real = &realTelegram{chatID: -42}
	for _, o := range planOrders(c, "T2") {
		if o.order.ChatID != -42 || o.wantChat != -42 || o.want != delivered {
			t.Errorf("order %s: chat %d want %d outcome %v; every order must go to the real chat", o.order.ID, o.order.ChatID, o.wantChat, o.want)
		}
	}
}

// scenario builds a report of three orders: one private, one to the
// migrated group, one to a blocked chat, all placed once, and the ideal
// outcome; tests then spoil it.
func scenario() *report {
	now := time.Now()
	orders := []plannedOrder{
		{order: shop.Order{ID: "A-1", ChatID: 1_000_001}, want: delivered, wantChat: 1_000_001},
		{order: shop.Order{ID: "A-2", ChatID: groupChat}, want: delivered, wantChat: supergroupChat},
		{order: shop.Order{ID: "A-3", ChatID: blockedChats[0]}, want: deadLettered, wantReason: "blocked"},
	}
	r := &report{cfg: testConfig(), orders: orders, placements: map[string]system.Placement{}, started: 5}
	for _, o := range orders {
		r.placements[o.order.ID] = system.Placement{Created: 1, CreatedAt: now}
	}
	r.messages = []emulator.Message{
		{ChatID: 1_000_001, MessageID: 1, Text: "<b>Order A-1 accepted</b>\n…", Time: now.Add(time.Second)},
		{ChatID: supergroupChat, MessageID: 1, Text: "<b>Order A-2 accepted</b>\n…", Time: now.Add(2 * time.Second)},
	}
	r.dead = []system.DeadLetter{{Seq: 1, Key: shop.NotificationKey("A-3"), Reason: "blocked"}}
	r.emuStats = &emulator.Stats{}
	return r
}

func failedChecks(r *report) []string {
	var out []string
	for _, c := range r.checks {
		if !c.ok {
			out = append(out, c.text+" "+strings.Join(c.detail, " | "))
		}
	}
	return out
}

func TestReportChecks(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(r *report)
		want  string // in a failed check; empty: everything passes
	}{
		{"all good", func(*report) {}, ""},
		{"duplicate message", func(r *report) { r.messages = append(r.messages, r.messages[0]) }, "A-1: delivered 2 times"},
		{"missing message", func(r *report) { r.messages = r.messages[1:] }, "A-1: never delivered"},
		{"wrong chat", func(r *report) { r.messages[1].ChatID = groupChat }, "A-2: delivered to chat -5001"},
		{"message to a dead chat", func(r *report) {
			r.messages = append(r.messages, emulator.Message{ChatID: blockedChats[0], Text: "<b>Order A-3 accepted</b>"})
		}, "A-3: chat 9000001 is dead"},
		{"stranger message", func(r *report) { r.messages = append(r.messages, emulator.Message{ChatID: 5, Text: "hello"}) }, "not from an order"},
		{"missing dead letter", func(r *report) { r.dead = nil }, "0 dead letters, want 1"},
		{"wrong reason", func(r *report) { r.dead[0].Reason = "max_attempts" }, "want blocked"},
		{"delivered order dead-lettered", func(r *report) {
			r.dead = append(r.dead, system.DeadLetter{Seq: 2, Key: shop.NotificationKey("A-1"), Reason: "max_attempts"})
		}, "want delivered"},
		{"request inside a pause", func(r *report) { r.emuStats.InAnyPause = 1 }, "inside a 429 pause"},
		{"created twice", func(r *report) { r.placements["A-1"] = system.Placement{Created: 2, CreatedAt: time.Now()} }, "created 2 times"},
		{"not drained", func(r *report) { r.ackPending = 3 }, "3 unacknowledged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scenario()
			tt.spoil(r)
			r.check()
			failed := failedChecks(r)
			if tt.want == "" {
				if len(failed) > 0 || !r.passed() {
					t.Fatalf("got failed checks %q, want none", failed)
				}
				return
			}
			if !strings.Contains(strings.Join(failed, "\n"), tt.want) {
				t.Fatalf("failed checks %q do not mention %q", failed, tt.want)
			}
			if r.passed() {
				t.Error("passed() is true with a failed check")
			}
		})
	}
}

func TestReportProcessesFail(t *testing.T) {
	r := scenario()
	r.check()
	r.complete = true
	r.leftovers = []string{"shop (pid 1)"}
	if r.passed() {
		t.Error("passed() is true with a process left running")
	}
	var out bytes.Buffer
	r.print(&out)
	for _, want := range []string{"RESULT: FAIL", "still running: shop (pid 1)", "dead letters    blocked 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPrepareDirRefusesForeignDirectories(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dir); err == nil {
		t.Fatal("prepareDir emptied a directory that is not the demo's")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("the foreign file is gone: %v", err)
	}

	demoDir := filepath.Join(dir, "demo")
	if err := prepareDir(demoDir); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(demoDir, "old.log")
	if err := os.WriteFile(old, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(demoDir); err != nil {
		t.Fatalf("prepareDir of an earlier demo's directory: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("an earlier demo's file survived: %v", err)
	}
}

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	bin := t.TempDir()
	for _, name := range append(binaries(false), "demo") {
		if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"-bin", bin, "-nats-config", "../../configs/nats-server.conf"}
	var stderr bytes.Buffer

	c, err := parseFlags(base, env(nil), &stderr)
	if err != nil || c.real != nil || c.orders != defaultOrdersEmulator {
		t.Fatalf("defaults: got %+v, %v; want the emulator and %d orders", c, err, defaultOrdersEmulator)
	}
	real := map[string]string{"TELEGRAM_BOT_TOKEN": "1:secret", "TELEGRAM_CHAT_ID": "-1001234"}
	c, err = parseFlags(base, env(real), &stderr)
	if err != nil || c.real == nil || c.real.chatID != -1001234 || c.orders != defaultOrdersReal {
		t.Fatalf("with TELEGRAM_*: got %+v, %v; want the real chat and %d orders", c, err, defaultOrdersReal)
	}
	if c, err = parseFlags(append(base, "-emulator"), env(real), &stderr); err != nil || c.real != nil {
		t.Fatalf("-emulator: got %+v, %v; want the emulator", c, err)
	}
	for _, bad := range [][]string{{"-orders", "-1"}, {"-repeat", "2"}, {"-progress", "fancy"}, {"-bin", t.TempDir()}, {"stray"}} {
		if _, err := parseFlags(append(append([]string{}, base...), bad...), env(nil), &stderr); err == nil {
			t.Errorf("%v: got nil error", bad)
		}
	}
	if _, err := parseFlags(append(base, "-orders", "500"), env(real), &stderr); err == nil {
		t.Error("500 orders to a real chat: got nil error")
	}
	if _, err := parseFlags(base, env(map[string]string{"TELEGRAM_BOT_TOKEN": "1:x", "TELEGRAM_CHAT_ID": "@channel"}), &stderr); err == nil {
		t.Error("a non-numeric TELEGRAM_CHAT_ID: got nil error")
	}
}
