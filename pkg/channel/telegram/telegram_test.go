package telegram_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

const token = "123456:channel-test_token"

func setup(t *testing.T, cfg emulator.Config, tokenOverride string) (*telegram.Channel, *emulator.Emulator) {
	t.Helper()
	cfg.Token = token
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	tok := token
	if tokenOverride != "" {
		tok = tokenOverride
	}
	api, err := botapi.New(tok, botapi.WithBaseURL(srv.URL), botapi.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := telegram.New(telegram.Config{}, api)
	if err != nil {
		t.Fatal(err)
	}
	return ch, emu
}

func attempt(chat int64, text string) *delivery.Attempt {
	n := notify.Notification{Key: "k", ChatID: chat, Text: text, CreatedAt: time.Now()}
	n.Normalize()
	r, _ := n.Recipient(notify.ChannelTelegram)
	return delivery.NewAttempt(n, r, nil)
}

// Telegram's answers, from the emulator over real HTTP, become the engine's
// outcomes.
func TestSendClassifiesTelegramsAnswers(t *testing.T) {
	ch, emu := setup(t, emulator.Config{Blocked: []int64{200}, NotFound: []int64{300}, Deactivated: []int64{400}, Migrate: map[int64]int64{-5: -1005}}, "")
	if err := emu.SetChatState(1006, emulator.ChatForbidden); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		a      *delivery.Attempt
		kind   delivery.OutcomeKind
		reason string
		check  func(t *testing.T, o delivery.Outcome)
	}{
		{"delivered", attempt(100, "hi"), delivery.Delivered, "delivered", func(t *testing.T, o delivery.Outcome) {
			if o.ProviderID == "" {
				t.Error("no provider id (message_id)")
			}
		}},
		{"blocked", attempt(200, "hi"), delivery.RecipientDead, botapi.ReasonBlocked, nil},
		{"chat not found", attempt(300, "hi"), delivery.RecipientDead, botapi.ReasonChatNotFound, nil},
		{"deactivated", attempt(400, "hi"), delivery.RecipientDead, botapi.ReasonDeactivated, nil},
		{"can't send to the user", attempt(1006, "hi"), delivery.RecipientDead, botapi.ReasonCantSend, nil},
		{"migrated", attempt(-5, "hi"), delivery.Redirect, botapi.ReasonMigrated, func(t *testing.T, o delivery.Outcome) {
			if o.RedirectTo != "-1005" {
				t.Errorf("redirect to %q, want -1005", o.RedirectTo)
			}
		}},
		{"content", attempt(100, strings.Repeat("x", 5000)), delivery.Rejected, botapi.ReasonContent, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ch.Send(ctx, tc.a)
			if o.Kind != tc.kind || o.Reason != tc.reason {
				t.Fatalf("outcome %v (%s: %d %s), want %v (%s)", o.Kind, o.Reason, o.Code, o.Description, tc.kind, tc.reason)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
	if err := emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 7}); err != nil {
		t.Fatal(err)
	}
	if o := ch.Send(ctx, attempt(100, "again")); o.Kind != delivery.RetryAfter || o.Delay != 7*time.Second {
		t.Fatalf("in a pause: %v after %v, want retry_after 7s", o.Kind, o.Delay)
	}
}

func TestSendTransientAndHalt(t *testing.T) {
	ch, emu := setup(t, emulator.Config{}, "")
	if err := emu.StartOutage(emulator.Outage{Mode: emulator.Fault5xx}); err != nil {
		t.Fatal(err)
	}
	if o := ch.Send(context.Background(), attempt(100, "hi")); o.Kind != delivery.Transient || o.Reason != botapi.ReasonServer {
		t.Fatalf("during a 5xx outage: %v (%s), want transient (server)", o.Kind, o.Reason)
	}
	bad, _ := setup(t, emulator.Config{}, "123456:wrong_token")
	if o := bad.Send(context.Background(), attempt(100, "hi")); o.Kind != delivery.Halt {
		t.Fatalf("with a wrong token: %v, want halt", o.Kind)
	}
	if err := bad.Probe(context.Background()); err == nil {
		t.Fatal("Probe with a wrong token succeeded")
	}
}

// A refused admission sends nothing: the emulator never sees the request.
func TestSendNotAdmitted(t *testing.T) {
	ch, emu := setup(t, emulator.Config{}, "")
	n := notify.Notification{Key: "k", ChatID: 100, Text: "hi", CreatedAt: time.Now()}
	n.Normalize()
	refused := &delivery.NotAdmittedError{Reason: "paused"}
	o := ch.Send(context.Background(), delivery.NewAttempt(n, "100", func() error { return refused }))
	if o.Kind != delivery.NotSent {
		t.Fatalf("refused: %v, want not_sent", o.Kind)
	}
	if got := emu.Stats().ByMethod["sendMessage"]; got != 0 {
		t.Fatalf("the emulator saw %d requests, want 0", got)
	}
}

// Unknown 400 and 403 descriptions are permanent and marked unrecognised.
func TestClassifyUnrecognised(t *testing.T) {
	for _, tc := range []struct {
		code        int
		description string
		kind        delivery.OutcomeKind
		reason      string
	}{
		{403, "Forbidden: the group chat was deleted", delivery.RecipientDead, "chat_deleted"},
		{400, "Bad Request: user not found", delivery.RecipientDead, "user_not_found"},
		{400, "Bad Request: TOPIC_CLOSED", delivery.Rejected, "topic_closed"},
		{403, "Forbidden: something Telegram added yesterday", delivery.RecipientDead, "forbidden_unknown"},
		{400, "Bad Request: BUTTON_URL_INVALID", delivery.Rejected, "markup"},
		{400, "Bad Request: SOMETHING_NEW", delivery.Rejected, "bad_request"},
	} {
		o := telegram.Classify(nil, &botapi.Error{Method: "sendMessage", Code: tc.code, Description: tc.description})
		if o.Kind != tc.kind || o.Reason != tc.reason || o.Description != tc.description {
			t.Errorf("%d %q: %v (%s), want %v (%s)", tc.code, tc.description, o.Kind, o.Reason, tc.kind, tc.reason)
		}
		if want := strings.HasSuffix(tc.reason, "unknown") || tc.reason == "bad_request"; o.Unrecognised != want {
			t.Errorf("%d %q: unrecognised %v, want %v", tc.code, tc.description, o.Unrecognised, want)
		}
	}
}

// Paid broadcast with a bot rate of 30 or less is refused, naming both.
func TestPaidBroadcastNeedsAHigherRate(t *testing.T) {
	err := telegram.Config{PaidBroadcast: true, BotRate: 30}.Validate()
	var fe *delivery.FieldError
	if !errors.As(err, &fe) || fe.Field != "PaidBroadcast" || !strings.Contains(fe.Problem, "{BotRate}") {
		t.Fatalf("Validate = %v, want a FieldError on PaidBroadcast naming BotRate", err)
	}
	for _, ok := range []telegram.Config{{PaidBroadcast: true}, {PaidBroadcast: true, BotRate: 500}, {BotRate: 30}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	ch, err := telegram.New(telegram.Config{PaidBroadcast: true}, &botapi.Client{})
	if err != nil || ch.Config().BotRate != telegram.PaidBroadcastRate {
		t.Fatalf("paid broadcast without a rate: %v, %+v; want 1000 msg/s", err, ch)
	}
}

// A notification's buttons, topic, link preview and photo reach the Bot
// API as Telegram expects them.
func TestSendRich(t *testing.T) {
	ch, emu := setup(t, emulator.Config{}, "")
	ctx := context.Background()
	const forum = -1001234567890
	rich := func(chat int64, mutate func(*notify.Notification)) *delivery.Attempt {
		n := notify.Notification{Key: "order:A1:shipped", ChatID: chat, Text: "<b>Order A1</b> shipped", ParseMode: notify.ParseModeHTML,
			Buttons: [][]notify.Button{{{Text: "Track", URL: "https://shop.example/A1"}}}, CreatedAt: time.Now()}
		mutate(&n)
		if err := n.Validate(); err != nil {
			t.Fatal(err)
		}
		n.Normalize()
		r, _ := n.Recipient(notify.ChannelTelegram)
		return delivery.NewAttempt(n, r, nil)
	}

	o := ch.Send(ctx, rich(forum, func(n *notify.Notification) {
		n.MessageThreadID = 12
		n.LinkPreview = notify.LinkPreview{URL: "https://shop.example/A1", PreferSmallMedia: true}
	}))
	if o.Kind != delivery.Delivered {
		t.Fatalf("text message: %v (%s %s)", o.Kind, o.Reason, o.Description)
	}
	m := emu.ChatMessages(forum)[0]
	if m.Method != "sendMessage" || m.MessageThreadID != 12 || len(m.Buttons) != 1 || m.Buttons[0][0] != (emulator.Button{Text: "Track", URL: "https://shop.example/A1"}) ||
		m.LinkPreview == nil || *m.LinkPreview != (emulator.LinkPreview{URL: "https://shop.example/A1", PreferSmallMedia: true}) {
		t.Errorf("the emulator got %+v", m)
	}

	o = ch.Send(ctx, rich(100, func(n *notify.Notification) { n.Photo = "https://shop.example/A1.jpg" }))
	if o.Kind != delivery.Delivered {
		t.Fatalf("photo: %v (%s %s)", o.Kind, o.Reason, o.Description)
	}
	m = emu.ChatMessages(100)[0]
	if m.Method != "sendPhoto" || m.Photo != "https://shop.example/A1.jpg" || m.Text != "<b>Order A1</b> shipped" || m.ParseMode != "HTML" ||
		len(m.Buttons) != 1 || m.Buttons[0][0].URL != "https://shop.example/A1" || m.LinkPreview != nil {
		t.Errorf("the emulator got %+v", m)
	}

	// What Telegram refuses of a rich message is this message's fault, not
	// the chat's: the notification moves on, the chat stays alive.
	for _, tc := range []struct {
		name   string
		a      *delivery.Attempt
		reason string
	}{
		{"a topic in a private chat", rich(100, func(n *notify.Notification) { n.MessageThreadID = 3 }), botapi.ReasonThreadNotFound},
		{"a photo that cannot be fetched", rich(100, func(n *notify.Notification) { n.Photo = "https://img.shop.invalid/A1.jpg" }), botapi.ReasonPhoto},
	} {
		if o := ch.Send(ctx, tc.a); o.Kind != delivery.Rejected || o.Reason != tc.reason {
			t.Errorf("%s: %v (%s %s), want rejected (%s)", tc.name, o.Kind, o.Reason, o.Description, tc.reason)
		}
	}
}

func TestKeyboardAndLinkPreview(t *testing.T) {
	if telegram.Keyboard(nil) != nil || telegram.LinkPreview(notify.LinkPreview{}) != nil {
		t.Fatal("no buttons and no preview settings must send neither")
	}
	k := telegram.Keyboard([][]notify.Button{{{Text: "a", URL: "https://a.example"}, {Text: "b", URL: "tg://resolve?domain=b"}}, {{Text: "c", URL: "http://c.example"}}})
	if len(k.InlineKeyboard) != 2 || len(k.InlineKeyboard[0]) != 2 || k.InlineKeyboard[0][1] != (botapi.InlineKeyboardButton{Text: "b", URL: "tg://resolve?domain=b"}) {
		t.Fatalf("keyboard %+v", k)
	}
	if p := telegram.LinkPreview(notify.LinkPreview{Disabled: true}); p == nil || !p.IsDisabled {
		t.Fatalf("disabled preview became %+v", p)
	}
}
