package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

func testConfig() *config {
	return &config{orders: 100, customers: 10, repeat: 0.2, seed: 7}
}

func TestPlanOrders(t *testing.T) {
	orders := planOrders(testConfig(), "T1")
	if len(orders) != 100 {
		t.Fatalf("orders: got %d, want 100", len(orders))
	}
	counts := map[kind]int{}
	ids := map[string]bool{}
	repeats := 0
	for _, o := range orders {
		if ids[o.order.ID] {
			t.Errorf("order id %s planned twice", o.order.ID)
		}
		ids[o.order.ID] = true
		if err := o.order.Validate(); err != nil {
			t.Errorf("order %s is invalid: %v", o.order.ID, err)
		}
		counts[o.kind]++
		if o.repeat != noRepeat {
			repeats++
		}
		switch {
		case o.kind == kindGroup && o.wantChat != supergroupChat:
			t.Errorf("group order %s: want chat %d, got %d", o.order.ID, supergroupChat, o.wantChat)
		case o.kind == kindBlocked || o.kind == kindBlockedMax:
			if o.order.Email == "" || !slices.Contains(blockedChats, o.order.ChatID) || !slices.Equal(o.may, []string{"email"}) {
				t.Errorf("blocked-chat order %s: %+v; want a blocked chat and an email, delivered by email", o.order.ID, o)
			}
		case o.kind == kindDeactivated && (o.want != deadLettered || o.order.Email != "" || o.order.Phone != ""):
			t.Errorf("deactivated-chat order %s: %+v; want no other address, dead-lettered", o.order.ID, o)
		}
	}
	for _, k := range []kind{kindTelegram, kindGroup, kindTelegramEmail, kindTelegramSMS, kindBlocked, kindBlockedMax, kindDeactivated, kindMax, kindEmail} {
		if counts[k] == 0 {
			t.Errorf("no order of kind %q among %v", k, counts)
		}
	}
	if repeats == 0 {
		t.Error("no repeated order")
	}
	if again := planOrders(testConfig(), "T1"); !again[42].order.Equal(orders[42].order) {
		t.Error("the same seed planned different orders")
	}
	for _, o := range planOutageOrders(&config{outageOrders: 3, seed: 7}, "T1") {
		if !o.outage || o.order.ChatID == 0 || o.order.Phone == "" || o.order.Email != "" || !slices.Equal(o.may, []string{"sms"}) {
			t.Errorf("outage order %+v: want a chat and a phone only, delivered by SMS", o)
		}
	}
}

func TestPlanOrdersRealTelegram(t *testing.T) {
	c := testConfig()
	c.orders = 5
	c.real = &realTelegram{chatID: -42}
	for _, o := range planOrders(c, "T2") {
		if o.order.ChatID != -42 || o.wantChat != -42 || o.want != delivered || o.order.Email != "" || o.order.Phone != "" || o.order.MaxUserID != 0 {
			t.Errorf("order %s: %+v; every order must go to the real chat only", o.order.ID, o.order)
		}
	}
}

// scenario builds the report of five orders, each placed once, and their
// ideal outcome: A-1 to a private chat, A-2 to the migrated group, A-3 to a
// blocked chat with an email (delivered by email), A-4 to a deactivated
// chat only (dead), A-5 during the outage with a phone (delivered by SMS);
// tests then spoil it.
func scenario() *report {
	now := time.Now()
	telegram := func(o shop.Order) plannedOrder {
		return plannedOrder{order: o, kind: kindTelegram, want: delivered, may: []string{"telegram"}, wantChat: o.ChatID}
	}
	a1 := telegram(shop.Order{ID: "A-1", ChatID: 1_000_001})
	a2 := telegram(shop.Order{ID: "A-2", ChatID: groupChat})
	a2.kind, a2.wantChat = kindGroup, supergroupChat
	a3 := plannedOrder{order: shop.Order{ID: "A-3", ChatID: blockedChats[0], Email: "ann.a-3@mail.example"}, kind: kindBlocked,
		want: delivered, may: []string{"email"}, reasons: map[string][]string{"telegram": {"blocked"}}}
	a4 := plannedOrder{order: shop.Order{ID: "A-4", ChatID: deactivatedChats[0]}, kind: kindDeactivated, want: deadLettered,
		reasons: map[string][]string{"telegram": {"deactivated"}}}
	a5 := plannedOrder{order: shop.Order{ID: "A-5", ChatID: 1_100_001, Phone: "+16660000001"}, kind: kindOutage, want: delivered,
		may: []string{"sms"}, wantChat: 1_100_001, reasons: map[string][]string{"telegram": {reasonFallbackTimeout, reasonMaxAttempts}}, outage: true}
	orders := []plannedOrder{a1, a2, a3, a4, a5}
	c := testConfig()
	c.outageOrders = 1
	r := &report{cfg: c, orders: orders, placements: map[string]system.Placement{}, started: 11,
		outageStart: now, outageEnd: now.Add(7 * time.Second), statuses: map[string]shop.PlacedOrder{}}
	routes := map[string][]string{"A-1": {"telegram"}, "A-2": {"telegram"}, "A-3": {"telegram", "email"}, "A-4": {"telegram"}, "A-5": {"telegram", "sms"}}
	for i, o := range orders {
		key := shop.NotificationKey(o.order.ID)
		r.placements[o.order.ID] = system.Placement{Created: 1, CreatedAt: now}
		r.outbox = append(r.outbox, system.OutboxRow{ID: int64(i + 1), Key: key, Channel: "telegram", Route: routes[o.order.ID], Published: true})
	}
	deliver := func(d system.Delivery, orderID string) {
		d.OrderID, d.Key, d.At = orderID, shop.NotificationKey(orderID), now.Add(time.Second)
		r.providers.Deliveries = append(r.providers.Deliveries, d)
		r.records = append(r.records, delivery.DeliveryRecord{Key: d.Key, Channel: d.Channel, Recipient: d.Recipient})
		r.events = append(r.events, system.Event{Event: delivery.Event{Key: d.Key, Event: delivery.EventDelivered, Channel: d.Channel}})
		r.statuses[orderID] = shop.PlacedOrder{Notification: shop.NotificationStatus{Status: shop.StatusDelivered, Channel: d.Channel}}
	}
	giveUp := func(orderID, channel, reason, next string) {
		key := shop.NotificationKey(orderID)
		r.dead = append(r.dead, system.DeadLetter{Seq: uint64(len(r.dead) + 1), Key: key, Reason: reason,
			Subject: "dead.notify." + channel + "." + reason + ".x"})
		ev := delivery.Event{Key: key, Event: delivery.EventFallback, Channel: channel, Next: next, Reason: reason}
		if next == "" {
			ev.Event = delivery.EventDead
			r.statuses[orderID] = shop.PlacedOrder{Notification: shop.NotificationStatus{Status: shop.StatusDead, Channel: channel, Reason: reason}}
		}
		r.events = append(r.events, system.Event{Event: ev})
	}
	deliver(system.Delivery{Channel: "telegram", Recipient: "1000001", Text: "<b>Order A-1 accepted</b>"}, "A-1")
	deliver(system.Delivery{Channel: "telegram", Recipient: "-1005001"}, "A-2")
	giveUp("A-3", "telegram", "blocked", "email")
	deliver(system.Delivery{Channel: "email", Address: "ann.a-3@mail.example", Subject: "Order A-3 accepted",
		Ref: email.MessageID(shop.NotificationKey("A-3"), mailDomain)}, "A-3")
	giveUp("A-4", "telegram", "deactivated", "")
	giveUp("A-5", "telegram", reasonFallbackTimeout, "sms")
	deliver(system.Delivery{Channel: "sms", Address: "+16660000001"}, "A-5")
	r.providers.TelegramStats = &emulator.Stats{}
	for _, ch := range system.Channels() {
		r.backlogs = append(r.backlogs, system.Backlog{Channel: ch})
	}
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

// copyOf returns the index of order id's copy on channel in r's deliveries.
func copyOf(r *report, id, channel string) int {
	for i, d := range r.providers.Deliveries {
		if d.OrderID == id && d.Channel == channel {
			return i
		}
	}
	panic("no copy of " + id + " on " + channel)
}

func TestReportChecks(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(r *report)
		want  string // in a failed check; empty: everything passes
	}{
		{"all good", func(*report) {}, ""},
		{"duplicate message", func(r *report) {
			r.providers.Deliveries = append(r.providers.Deliveries, r.providers.Deliveries[copyOf(r, "A-1", "telegram")])
		}, "A-1: 2 copies (telegram, telegram)"},
		{"a second channel delivered it too", func(r *report) {
			d := r.providers.Deliveries[copyOf(r, "A-3", "email")]
			d.Channel, d.Recipient = "sms", "p1"
			r.providers.Deliveries = append(r.providers.Deliveries, d)
		}, "A-3: 2 copies (email, sms)"},
		{"missing message", func(r *report) {
			r.providers.Deliveries = slices.Delete(r.providers.Deliveries, copyOf(r, "A-1", "telegram"), copyOf(r, "A-1", "telegram")+1)
		}, "A-1 (Telegram chat): telegram neither delivered it nor gave up"},
		{"wrong chat", func(r *report) { r.providers.Deliveries[copyOf(r, "A-2", "telegram")].Recipient = "-5001" }, "A-2: delivered to chat -5001"},
		{"message to a blocked chat", func(r *report) {
			r.providers.Deliveries = append(r.providers.Deliveries, system.Delivery{Channel: "telegram", Recipient: "9000001",
				OrderID: "A-3", Key: shop.NotificationKey("A-3")})
		}, "A-3: delivered by telegram and dead-lettered there as blocked"},
		{"stranger message", func(r *report) {
			r.providers.Deliveries = append(r.providers.Deliveries, system.Delivery{Channel: "telegram", Recipient: "5", Text: "hello"})
		}, "1 unexpected"},
		{"missing dead letter", func(r *report) { r.dead = r.dead[1:] }, "A-3 (blocked Telegram chat + email): telegram neither delivered it nor gave up"},
		{"wrong reason", func(r *report) { r.dead[0].Reason = "max_attempts" }, "telegram gave up as max_attempts, want blocked"},
		{"no dead event", func(r *report) {
			r.events = slices.DeleteFunc(r.events, func(e system.Event) bool { return e.Event.Event == delivery.EventDead })
		}, "A-4 (deactivated Telegram chat, no other address): 0 dead events, want 1"},
		{"outage order delivered by Telegram", func(r *report) {
			i := copyOf(r, "A-5", "sms")
			r.providers.Deliveries[i].Channel, r.providers.Deliveries[i].Recipient = "telegram", "1100001"
		}, "a Telegram copy"},
		{"Message-ID not from the key", func(r *report) { r.providers.Deliveries[copyOf(r, "A-3", "email")].Ref = "x@shop.example" }, "A-3: Message-ID x@shop.example"},
		{"email to another address", func(r *report) { r.providers.Deliveries[copyOf(r, "A-3", "email")].Address = "bob@mail.example" }, "A-3: emailed to bob@mail.example"},
		{"record names another channel", func(r *report) { r.records[0].Channel = "max" }, "A-1: delivered by telegram, the record says max"},
		{"shop shows another status", func(r *report) {
			r.statuses["A-3"] = shop.PlacedOrder{Notification: shop.NotificationStatus{Status: shop.StatusPending, Channel: "email"}}
		}, "A-3: the shop says pending/email, want delivered/email"},
		{"request inside a pause", func(r *report) { r.providers.TelegramStats.InAnyPause = 1 }, "inside a 429 pause"},
		{"created twice", func(r *report) { r.placements["A-1"] = system.Placement{Created: 2, CreatedAt: time.Now()} }, "created 2 times"},
		{"not drained", func(r *report) { r.backlogs[2].AckPending = 3 }, "email 0 pending, 3 unacknowledged"},
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
	for _, want := range []string{"RESULT: FAIL", "still running: shop (pid 1)", "dead letters    blocked 1, deactivated 1, fallback_timeout 1",
		"deliveries      telegram 2, email 1, sms 1", "telegram: blocked → email ×1"} {
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
	for _, name := range append(binaries(false, false), "demo") {
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
