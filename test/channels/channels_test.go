// Package channels_test runs the whole pipeline with every channel on real
// components: the shop and the publisher over a real SQLite file, embedded
// NATS with JetStream, the telegram, email and SMS workers on the delivery
// engine, the Bot API emulator and the Twilio emulator over real HTTP, and a
// real SMTP server (the Mailpit binary make build builds). It checks
// fallback along a route and exactly one delivery across channels (issue
// 13).
package channels_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/mailpittest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/testenv"
	botemulator "github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/channel/sms"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
	"github.com/tgnotify/tgnotify/pkg/twilio"
	smsemulator "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

const (
	accountSID = "AC0123456789abcdef0123456789abcdef"
	authToken  = "f00dfeedf00dfeedf00dfeedf00dfeed"
	sender     = "+15005550006"
	from       = "Shop <noreply@shop.example>"
)

// system is every part of the pipeline, running.
type pipeline struct {
	*testenv.Env
	mail    *mailpittest.Server
	sms     *smsemulator.Emulator
	shop    *httptest.Server
	svc     *shop.Service
	workers map[string]*testenv.Worker
}

type options struct {
	telegram botemulator.Config
	mail     mailpittest.Options
	numbers  map[string]smsemulator.NumberState
	// fallback is the telegram worker's fallback_after for transactional
	// notifications.
	fallback time.Duration
	// shop are the shop's options.
	shop []shop.Option
}

func start(t *testing.T, o options) *pipeline {
	t.Helper()
	lim := botemulator.DefaultLimits()
	lim.BotRate, lim.BotBurst, lim.ChatRate, lim.ChatBurst = 300, 300, 20, 3
	o.telegram.Limits = lim
	s := &pipeline{workers: map[string]*testenv.Worker{}}
	s.mail = mailpittest.Start(t, o.mail) // skips without the built binaries
	s.Env = testenv.New(t, testenv.Options{Emulator: o.telegram})

	emu, err := smsemulator.New(smsemulator.Config{AccountSID: accountSID, AuthToken: authToken, Numbers: o.numbers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	s.sms = emu

	engine := delivery.Config{BackoffBase: 50 * time.Millisecond, BackoffCap: 500 * time.Millisecond, BreakerOpen: 300 * time.Millisecond,
		MaxAttempts: 1000, FallbackTransactional: o.fallback}
	s.workers["telegram"] = s.StartWorker(testenv.WorkerOptions{Config: engine, Telegram: telegram.Config{BotRate: 300, ChatRate: 20}})

	mailCh, err := email.New(email.Config{Addr: s.mail.SMTPAddr, TLS: email.TLSNone, From: from, Rate: 100, RecipientPerMinute: 600}, email.Deps{Logger: s.Log})
	if err != nil {
		t.Fatal(err)
	}
	s.workers["email"] = s.StartWorker(testenv.WorkerOptions{Config: engine, Channel: mailCh})

	client, err := twilio.New(accountSID, authToken, twilio.WithBaseURL(srv.URL), twilio.WithFrom(sender))
	if err != nil {
		t.Fatal(err)
	}
	smsCh, err := sms.New(sms.Config{SegmentsPerSecond: 100, RecipientPerMinute: 600}, client, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	s.workers["sms"] = s.StartWorker(testenv.WorkerOptions{Config: engine, Channel: smsCh})

	// The shop and the publisher over a real SQLite file.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if s.svc, err = shop.NewService(ctx, db, o.shop...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.svc.Close() })
	s.shop = httptest.NewServer(shop.NewHandler(s.svc, s.Log))
	t.Cleanup(s.shop.Close)
	pub, err := publisher.Open(ctx, path, s.NC, publisher.Options{Logger: s.Log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- pub.Run(runCtx) }()
	go func() { done <- shop.NewEvents(s.svc, s.JS, jetstream.DefaultNames(), s.Log).Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
		pub.Close()
	})
	return s
}

// place posts an order to the shop and returns the HTTP status.
func (s *pipeline) place(t *testing.T, o shop.Order) int {
	t.Helper()
	if o.Customer == "" {
		o.Customer = "Ann <3"
	}
	if o.Items == nil {
		o.Items = []shop.Item{{Name: "Tea", Qty: 1, PriceCents: 350}}
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(s.shop.URL+"/orders", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /orders %s: %d %s", o.ID, resp.StatusCode, body)
	}
	return resp.StatusCode
}

// status is the shop's view of an order's notification.
func (s *pipeline) status(t *testing.T, id string) shop.NotificationStatus {
	t.Helper()
	p, err := s.svc.Order(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p.Notification
}

// delivered counts the deliveries of an order's notification on every
// channel: Telegram messages with its text, emails with its subject, SMS
// with its text.
func (s *pipeline) delivered(t *testing.T, id string) map[string]int {
	t.Helper()
	n := map[string]int{}
	needle := "Order " + id + " accepted"
	for _, m := range s.Emu.Messages() {
		if strings.Contains(m.Text, needle) {
			n["telegram"]++
		}
	}
	for _, m := range s.mail.Messages() {
		if strings.Contains(m.Subject, needle) {
			n["email"]++
		}
	}
	for _, m := range s.sms.Messages() {
		if strings.Contains(m.Body, needle) {
			n["sms"]++
		}
	}
	return n
}

// drained waits until every worker's consumer has nothing pending and
// nothing in its hands.
func (s *pipeline) drained(t *testing.T) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() bool {
		for _, w := range s.workers {
			info, err := w.Resources.Consumer.Info(context.Background())
			if err != nil || info.NumPending+uint64(info.NumAckPending) != 0 {
				return false
			}
		}
		return true
	}, "every channel's consumer to drain")
}

// A blocked Telegram chat: exactly one email, with the order's text and a
// Message-ID from the key; a healthy chat gets no email; the same order
// placed three times is one delivery in all.
func TestBlockedChatGetsOneEmail(t *testing.T) {
	s := start(t, options{telegram: botemulator.Config{Blocked: []int64{200}}})
	for range 3 {
		s.place(t, shop.Order{ID: "B1", ChatID: 200, Email: "ann@example.com"})
	}
	s.place(t, shop.Order{ID: "H1", ChatID: 100, Email: "bob@example.com"})
	natstest.WaitFor(t, 30*time.Second, func() bool {
		return s.status(t, "B1").Status == shop.StatusDelivered && s.status(t, "H1").Status == shop.StatusDelivered
	}, "both orders' notifications delivered, as the shop hears it")
	s.drained(t)

	if got := s.delivered(t, "B1"); got["email"] != 1 || got["telegram"] != 0 || got["sms"] != 0 {
		t.Fatalf("B1 (blocked chat, placed three times) delivered %v, want one email", got)
	}
	if got := s.delivered(t, "H1"); got["telegram"] != 1 || got["email"] != 0 {
		t.Fatalf("H1 (healthy chat) delivered %v, want Telegram only", got)
	}
	var mail mailpittest.Summary
	for _, m := range s.mail.Messages() {
		if strings.Contains(m.Subject, "B1") {
			mail = m
		}
	}
	want := email.MessageID(shop.NotificationKey("B1"), "shop.example")
	if mail.MessageID != want {
		t.Fatalf("Message-ID <%s>, want %s (derived from the key)", mail.MessageID, want)
	}
	full := s.mail.Message(mail.ID)
	if !strings.Contains(full.Text, "Order B1 accepted") || !strings.Contains(full.HTML, "Ann &lt;3") || len(full.To) != 1 || full.To[0].Address != "ann@example.com" {
		t.Fatalf("the email: to %v, text %q, html %q", full.To, full.Text, full.HTML)
	}
	if st := s.status(t, "B1"); st.Channel != "email" {
		t.Fatalf("the shop says B1 was delivered by %q, want email", st.Channel)
	}
}

// A Telegram outage longer than fallback_after: one SMS, and no Telegram
// copy after the outage ends.
func TestTelegramOutageFallsBackToSMS(t *testing.T) {
	s := start(t, options{fallback: 2 * time.Second})
	if err := s.Emu.StartOutage(botemulator.Outage{Mode: botemulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	s.place(t, shop.Order{ID: "O1", ChatID: 300, Phone: "+79991234567"})
	natstest.WaitFor(t, 30*time.Second, func() bool { return s.delivered(t, "O1")["sms"] == 1 }, "the SMS")
	s.Emu.StopOutage()
	s.place(t, shop.Order{ID: "O2", ChatID: 300, Phone: "+79991234567"}) // Telegram works again
	natstest.WaitFor(t, 30*time.Second, func() bool { return s.delivered(t, "O2")["telegram"] == 1 }, "the next order by Telegram")
	s.drained(t)
	if got := s.delivered(t, "O1"); got["sms"] != 1 || got["telegram"] != 0 {
		t.Fatalf("O1 delivered %v after the outage ended, want one SMS and no Telegram copy", got)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return s.status(t, "O1").Channel == "sms" }, "the shop to hear of the SMS")
}

// A hard-bounced email falls through to SMS.
func TestHardBounceFallsThroughToSMS(t *testing.T) {
	s := start(t, options{mail: mailpittest.Options{AllowedRecipients: `@good\.example$`}})
	s.place(t, shop.Order{ID: "M1", Email: "gone@bounce.example", Phone: "+79991234568"})
	natstest.WaitFor(t, 30*time.Second, func() bool { return s.delivered(t, "M1")["sms"] == 1 }, "the SMS")
	s.drained(t)
	if got := s.delivered(t, "M1"); got["email"] != 0 {
		t.Fatalf("M1 delivered %v, want SMS only", got)
	}
	dl := s.DeadLetters()
	if len(dl) != 1 || !strings.HasPrefix(dl[0].Subject, "dead.notify.email.hard_bounce.e") {
		t.Fatalf("dead letters %v, want the bounced email's", subjects(dl))
	}
}

// Every channel dead: a dead letter for each, with its reason, and one dead
// event; the shop says so.
func TestEveryChannelDead(t *testing.T) {
	s := start(t, options{
		telegram: botemulator.Config{Blocked: []int64{400}},
		mail:     mailpittest.Options{AllowedRecipients: `@good\.example$`},
		numbers:  map[string]smsemulator.NumberState{"+15005550001": smsemulator.NumberInvalid},
	})
	s.place(t, shop.Order{ID: "D1", ChatID: 400, Email: "gone@bounce.example", Phone: "+15005550001"})
	natstest.WaitFor(t, 30*time.Second, func() bool { return s.status(t, "D1").Status == shop.StatusDead }, "the shop to hear the notification is dead")
	got := map[string]bool{}
	for _, s := range subjects(s.DeadLetters()) {
		parts := strings.Split(s, ".")
		got[parts[2]+"/"+parts[3]] = true
	}
	if len(got) != 3 || !got["telegram/blocked"] || !got["email/hard_bounce"] || !got["sms/invalid_number"] {
		t.Fatalf("dead letters by channel/reason %v, want one for each channel", got)
	}
	if ev := s.Events(delivery.EventDead); len(ev) != 1 || ev[0].Key != shop.NotificationKey("D1") || ev[0].Channel != "sms" {
		t.Fatalf("dead events %+v, want one, from the last channel", ev)
	}
	if n := s.delivered(t, "D1"); n["telegram"]+n["email"]+n["sms"] != 0 {
		t.Fatalf("D1 delivered %v", n)
	}
}

// An order in Russian is told in Russian, from the shop's templates, on the
// channel that reaches the customer, with a button to the order: accepted
// by Telegram, then — the chat blocked meanwhile — shipped by email and,
// the mailbox gone, delivered by SMS with the button's link.
func TestTemplatesInTheCustomersLanguage(t *testing.T) {
	s := start(t, options{
		mail: mailpittest.Options{AllowedRecipients: `@good\.example$`},
		shop: []shop.Option{shop.WithOrderURL("https://shop.example/orders")},
	})
	post := func(path string) {
		t.Helper()
		resp, err := http.Post(s.shop.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	s.place(t, shop.Order{ID: "R1", ChatID: 500, Email: "anna@good.example", Phone: "+79991234569", Locale: "ru-RU", Customer: "Анна <3 & *co*"})
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(s.Emu.ChatMessages(500)) == 1 }, "the Telegram message")
	m := s.Emu.ChatMessages(500)[0]
	if !strings.HasPrefix(m.Text, "<b>Заказ R1 принят</b>\nЗдравствуйте, Анна &lt;3 &amp; *co*!") || m.ParseMode != "HTML" ||
		len(m.Buttons) != 1 || m.Buttons[0][0] != (botemulator.Button{Text: "Открыть заказ", URL: "https://shop.example/orders/R1"}) {
		t.Fatalf("Telegram got %q with buttons %+v", m.Text, m.Buttons)
	}

	s.Emu.Block(500)
	post("/orders/R1/ship")
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(s.mail.Messages()) == 1 }, "the email")
	full := s.mail.Message(s.mail.Messages()[0].ID)
	if full.Subject != "Заказ R1 отправлен" || !strings.Contains(full.HTML, "Анна &lt;3 &amp; *co*, ваш заказ уже в пути.") ||
		!strings.Contains(full.HTML, `<a href="https://shop.example/orders/R1/tracking"`) || !strings.Contains(full.Text, "Анна <3 & *co*, ваш заказ уже в пути.") ||
		!strings.Contains(full.Text, "Отследить заказ: https://shop.example/orders/R1/tracking") {
		t.Fatalf("the email: subject %q\nhtml %s\ntext %s", full.Subject, full.HTML, full.Text)
	}

	s.place(t, shop.Order{ID: "R2", Email: "gone@bounce.example", Phone: "+79991234569", Locale: "ru", Customer: "Анна"})
	post("/orders/R2/ship")
	post("/orders/R2/deliver")
	natstest.WaitFor(t, 30*time.Second, func() bool { return len(s.sms.Messages()) == 3 }, "three SMS")
	var bodies []string
	for _, m := range s.sms.Messages() {
		bodies = append(bodies, m.Body)
	}
	want := []string{
		"Заказ R2 принят\nИтого: 3.50. Спасибо, Анна!\nhttps://shop.example/orders/R2",
		"Заказ R2 отправлен\nОн уже в пути.\nhttps://shop.example/orders/R2/tracking",
		"Заказ R2 доставлен\nСпасибо за покупку!\nhttps://shop.example/orders/R2/review",
	}
	slices.Sort(bodies)
	slices.Sort(want)
	if !slices.Equal(bodies, want) {
		t.Fatalf("SMS bodies %q, want %q", bodies, want)
	}
	s.drained(t)
	for _, key := range []string{shop.NotificationKeyFor("R2", shop.EventShipped), shop.NotificationKeyFor("R2", shop.EventDelivered)} {
		if !slices.ContainsFunc(s.Events(delivery.EventDelivered), func(e delivery.Event) bool { return e.Key == key && e.Channel == "sms" }) {
			t.Errorf("no delivered event for %s by SMS", key)
		}
	}
}

func subjects(ms []*natsjs.RawStreamMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Subject
	}
	return out
}
