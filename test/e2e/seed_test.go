package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// pipeline is the whole system: shop → outbox → publisher → NOTIFY →
// worker → emulator.
type pipeline struct {
	*testenv.Env
	shop   *httptest.Server
	worker *testenv.Worker
}

func start(t *testing.T, emu emulator.Config, cfg telegram.Config) *pipeline {
	t.Helper()
	env := testenv.New(t, testenv.Options{Emulator: emu})
	path := filepath.Join(t.TempDir(), "shop.db")
	ctx := context.Background()
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc, err := shop.NewService(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	srv := httptest.NewServer(shop.NewHandler(svc, env.Log))
	t.Cleanup(srv.Close)

	pub, err := publisher.Open(ctx, path, env.NC, publisher.Options{Logger: env.Log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("publisher Run: %v", err)
		}
		pub.Close()
	})
	w := env.StartWorker(testenv.WorkerOptions{Telegram: cfg})
	return &pipeline{Env: env, shop: srv, worker: w}
}

func (p *pipeline) placeOrder(t *testing.T, id string, chat int64) int {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"chat_id":%d,"customer":"Ann","items":[{"name":"Tea","qty":1,"price_cents":350}]}`, id, chat)
	resp, err := http.Post(p.shop.URL+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func fast() (emulator.Limits, telegram.Config) {
	l := emulator.DefaultLimits()
	l.BotRate, l.ChatRate = 300, 20
	return l, telegram.Config{BotRate: 300, ChatRate: 20}
}

// The seed's scenario: three orders to chats 100, 200 and 300, the customer
// in 200 blocked the bot. 100 and 300 get their message; 200's is dead with
// Telegram's text; there is no second request to the dead chat: three API
// calls for three messages.
func TestSeedBlockedChat(t *testing.T) {
	lim, cfg := fast()
	p := start(t, emulator.Config{Limits: lim, Blocked: []int64{200}}, cfg)
	for i, chat := range []int64{100, 200, 300} {
		if code := p.placeOrder(t, fmt.Sprint(i+1), chat); code != http.StatusCreated {
			t.Fatalf("order %d: status %d", i+1, code)
		}
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return p.Emu.Stats().Delivered == 2 && len(p.DeadLetters()) == 1 }, "two delivered, one dead")
	for _, chat := range []int64{100, 300} {
		if ms := p.Emu.ChatMessages(chat); len(ms) != 1 || !strings.Contains(ms[0].Text, "accepted") {
			t.Errorf("chat %d received %v", chat, ms)
		}
	}
	dl := p.DeadLetters()[0]
	if dl.Header.Get(jetstream.HeaderKey) != "order:2:accepted" || dl.Header.Get(jetstream.HeaderErrorDescription) != "Forbidden: bot was blocked by the user" {
		t.Fatalf("dead letter headers %v", dl.Header)
	}
	if got := p.Emu.Stats().ByMethod["sendMessage"]; got != 3 {
		t.Fatalf("%d API calls for three messages, want 3", got)
	}
}

// A 429 with retry_after 5: no request is made before it has passed, then
// the pending messages go.
func TestSeedRateLimit(t *testing.T) {
	lim, cfg := fast()
	p := start(t, emulator.Config{Limits: lim}, cfg)
	if err := p.Emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 5}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for i, chat := range []int64{100, 200, 300} {
		p.placeOrder(t, fmt.Sprint(i+1), chat)
	}
	natstest.WaitFor(t, 30*time.Second, func() bool { return p.Emu.Stats().Delivered == 3 }, "all three delivered")
	// Every request the emulator saw inside the pause was on its way when
	// the worker read the 429 (it counts them); none started after.
	st, ws := p.Emu.Stats(), p.worker.Stats()
	if st.RateLimited < 1 || st.RateLimited > 1+ws.Crossing429 || st.InAnyPause > ws.Crossing429 {
		t.Fatalf("%d 429s and %d requests decided inside the pause, %d crossing the first 429; want 1 plus, and at most, the crossing ones",
			st.RateLimited, st.InAnyPause, ws.Crossing429)
	}
	for _, m := range p.Emu.Messages() {
		if m.Time.Sub(begin) < 5*time.Second {
			t.Errorf("chat %d got its message %v after the 429, inside the 5 s pause", m.ChatID, m.Time.Sub(begin))
		}
	}
}

// The same order placed three times, including after its message was sent:
// one order, one outbox row, one Telegram message.
func TestSeedRepeatedOrder(t *testing.T) {
	lim, cfg := fast()
	p := start(t, emulator.Config{Limits: lim}, cfg)
	if code := p.placeOrder(t, "A1", 100); code != http.StatusCreated {
		t.Fatalf("first POST = %d, want 201", code)
	}
	if code := p.placeOrder(t, "A1", 100); code != http.StatusOK {
		t.Fatalf("repeated POST = %d, want 200", code)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return p.Emu.Stats().Delivered == 1 }, "delivered")
	if code := p.placeOrder(t, "A1", 100); code != http.StatusOK {
		t.Fatalf("POST after sending = %d, want 200", code)
	}
	// Let the pipeline process anything the last request could have caused:
	// a marker order to the same chat is delivered after it.
	p.placeOrder(t, "A2", 100)
	natstest.WaitFor(t, 20*time.Second, func() bool { return len(p.Emu.ChatMessages(100)) == 2 }, "marker delivered")
	ms := p.Emu.ChatMessages(100)
	if !strings.Contains(ms[0].Text, "Order A1 accepted") || !strings.Contains(ms[1].Text, "Order A2 accepted") {
		t.Fatalf("chat 100 received %q and %q; want A1 once, then A2", ms[0].Text, ms[1].Text)
	}
}
