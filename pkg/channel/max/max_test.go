package max_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	maxchannel "github.com/tgnotify/tgnotify/pkg/channel/max"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

const token = "max-channel-test-token_0123456789abcdef"

// bundle is a channel whose client talks to an emulator over real HTTP.
type bundle struct {
	emu *emulator.Emulator
	srv *httptest.Server
	ch  *maxchannel.Channel
}

func setup(t *testing.T, cfg emulator.Config, chcfg maxchannel.Config, opts ...maxapi.Option) *bundle {
	t.Helper()
	cfg.Token = token
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	return &bundle{emu: emu, srv: srv, ch: newChannel(t, srv.URL, token, chcfg, opts...)}
}

func newChannel(t *testing.T, url, tok string, chcfg maxchannel.Config, opts ...maxapi.Option) *maxchannel.Channel {
	t.Helper()
	client, err := maxapi.New(tok, append([]maxapi.Option{maxapi.WithBaseURL(url), maxapi.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	ch, err := maxchannel.New(chcfg, client)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func note(text string) notify.Notification {
	return notify.Notification{Key: "order:A1:accepted", MaxUserID: 42, Text: text}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (maxchannel.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v, want valid (defaults)", err)
	}
	err := maxchannel.Config{Rate: -1, UserRate: -2, ChatPerMinute: -3, RetryAfter: -time.Second}.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fe, ok := errors.AsType[*delivery.FieldError](e)
		if !ok {
			t.Fatalf("%v is not a *delivery.FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, ","); got != "Rate,UserRate,ChatPerMinute,RetryAfter" {
		t.Errorf("fields %s, want every bad field named", got)
	}
	if _, err := maxchannel.New(maxchannel.Config{Rate: -1}, nil); err == nil {
		t.Error("New with a bad Config succeeded")
	}
	c, _ := maxapi.New(token)
	if _, err := maxchannel.New(maxchannel.Config{}, nil); err == nil {
		t.Error("New without a client succeeded")
	}
	ch, err := maxchannel.New(maxchannel.Config{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := ch.Config(); got.Rate != maxchannel.DefaultRate || got.UserRate != maxchannel.DefaultUserRate ||
		got.ChatPerMinute != maxchannel.DefaultChatPerMinute || got.RetryAfter != maxchannel.DefaultRetryAfter {
		t.Errorf("Config() = %+v, want the defaults", got)
	}
}

func TestLimitsAndRecipient(t *testing.T) {
	t.Parallel()
	c, _ := maxapi.New(token)
	ch, err := maxchannel.New(maxchannel.Config{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Name() != "max" {
		t.Errorf("Name() = %q", ch.Name())
	}
	lim := ch.Limits()
	if err := lim.Validate(); err != nil || lim.Rate != 30 || lim.RecipientRate("u42") != 1 || lim.RecipientRate("c-7") != rate.Limit(20.0/60) {
		t.Errorf("Limits: %v, rate %v, user %v, chat %v; want 30/s, 1/s per user, 20/min per chat",
			err, lim.Rate, lim.RecipientRate("u42"), lim.RecipientRate("c-7"))
	}
	for _, tt := range []struct {
		n    notify.Notification
		want string
	}{
		{notify.Notification{MaxUserID: 42}, "u42"},
		{notify.Notification{MaxChatID: -7001}, "c-7001"},
		{notify.Notification{ChatID: 5, MaxChatID: 9}, "c9"},
	} {
		if got, err := ch.Recipient(tt.n); got != tt.want || err != nil {
			t.Errorf("Recipient(%+v) = %q, %v; want %q", tt.n, got, err, tt.want)
		}
	}
	if got, err := ch.Recipient(notify.Notification{Key: "k", ChatID: 5}); err == nil {
		t.Errorf("Recipient of a Telegram-only notification = %q, want an error", got)
	}
}

func TestSendDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{}, maxchannel.Config{DisableLinkPreview: true})
	n := notify.Notification{Key: "order:A1:accepted", MaxUserID: 42, ParseMode: notify.ParseModeHTML, DisableNotification: true,
		Text: `<b>Order A1</b> accepted <tg-spoiler>code 1234</tg-spoiler>, <a href="https://shop.example/A1">track</a>`}
	o := b.ch.Send(t.Context(), delivery.NewAttempt(n, "u42", nil))
	if o.Kind != delivery.Delivered || !strings.HasPrefix(o.ProviderID, "mid.") {
		t.Fatalf("outcome %+v, want delivered with the mid", o)
	}
	ms := b.emu.RecipientMessages(emulator.User(42))
	if len(ms) != 1 {
		t.Fatalf("user 42 got %d messages, want 1", len(ms))
	}
	m := ms[0]
	if m.MessageID != o.ProviderID || m.Format != "html" || m.Notify || !m.DisableLinkPreview ||
		m.Text != `<b>Order A1</b> accepted code 1234, <a href="https://shop.example/A1">track</a>` {
		t.Errorf("the emulator got %+v, want the converted HTML, silent, without link preview", m)
	}
	o = b.ch.Send(t.Context(), delivery.NewAttempt(notify.Notification{Key: "k", MaxChatID: -7, Text: "*hi*", ParseMode: notify.ParseModeMarkdownV2}, "c-7", nil))
	if o.Kind != delivery.Delivered {
		t.Fatalf("to a chat: %+v", o)
	}
	if ms := b.emu.RecipientMessages(emulator.Chat(-7)); len(ms) != 1 || ms[0].Text != "<b>hi</b>" || !ms[0].Notify {
		t.Errorf("chat -7 got %+v, want the MarkdownV2 as HTML, notifying", ms)
	}
}

// A notification's MAX body, photo, buttons and preview setting reach MAX
// as its image and inline_keyboard attachments; a tg:// button, which MAX
// cannot open, is left out.
func TestSendRich(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{}, maxchannel.Config{})
	n := notify.Notification{Key: "order:A1:shipped", MaxUserID: 42, ParseMode: notify.ParseModeHTML,
		Text:        "<b>Telegram's</b> text",
		Bodies:      notify.Bodies{Max: &notify.MaxBody{Text: "<b>MAX's</b> text &amp; more", Format: notify.MaxFormatHTML}},
		Photo:       "https://cdn.shop.example/A1.jpg",
		LinkPreview: notify.LinkPreview{Disabled: true},
		Buttons: [][]notify.Button{
			{{Text: "Track", URL: "https://shop.example/A1"}, {Text: "Bot", URL: "tg://resolve?domain=shop_bot"}},
			{{Text: "Only Telegram", URL: "tg://resolve?domain=shop_bot"}},
			{{Text: "Help", URL: "http://shop.example/help"}},
		}}
	if o := b.ch.Send(t.Context(), delivery.NewAttempt(n, "u42", nil)); o.Kind != delivery.Delivered {
		t.Fatalf("outcome %+v, want delivered", o)
	}
	m := b.emu.RecipientMessages(emulator.User(42))[0]
	want := [][]emulator.Button{{{Type: "link", Text: "Track", URL: "https://shop.example/A1"}}, {{Type: "link", Text: "Help", URL: "http://shop.example/help"}}}
	if m.Text != "<b>MAX's</b> text &amp; more" || m.Format != "html" || !m.DisableLinkPreview ||
		len(m.Images) != 1 || m.Images[0] != "https://cdn.shop.example/A1.jpg" || fmt.Sprint(m.Buttons) != fmt.Sprint(want) {
		t.Errorf("the emulator got %+v", m)
	}
	if got := maxchannel.Buttons([][]notify.Button{{{Text: "x", URL: "tg://x"}}}); got != nil {
		t.Errorf("only tg buttons became %v, want none", got)
	}
}

// TestOutcomes is the table of MAX's answers and what they mean for
// delivery, sent through the emulator over real HTTP.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	states := map[emulator.Recipient]emulator.RecipientState{
		emulator.User(1): emulator.StateBlocked,
		emulator.Chat(2): emulator.StateDenied,
		emulator.User(3): emulator.StateNotFound,
		emulator.Chat(3): emulator.StateNotFound,
		emulator.User(4): emulator.StateForbidden,
	}
	for _, tt := range []struct {
		name         string
		cfg          emulator.Config
		prepare      func(*testing.T, *emulator.Emulator)
		recipient    string
		text         string
		kind         delivery.OutcomeKind
		reason       string
		code         int
		delay        time.Duration
		maybe        bool
		unrecognised bool
		describes    string
	}{
		{name: "delivered", recipient: "u10", kind: delivery.Delivered, reason: "delivered"},
		{name: "429 with Retry-After", prepare: pause(3), recipient: "u10", kind: delivery.RetryAfter, reason: "rate_limited", code: 429, delay: 3 * time.Second, describes: "too.many.requests"},
		{name: "429 without Retry-After", cfg: emulator.Config{OmitRetryAfter: true}, prepare: pause(3), recipient: "u10", kind: delivery.RetryAfter, reason: "rate_limited", code: 429, delay: 1500 * time.Millisecond},
		{name: "blocked", recipient: "u1", kind: delivery.RecipientDead, reason: "blocked", code: 403, describes: "chat.denied: error.dialog.suspended"},
		{name: "chat denied", recipient: "c2", kind: delivery.RecipientDead, reason: "chat_denied", code: 403, describes: "chat.denied"},
		{name: "user not found", recipient: "u3", kind: delivery.RecipientDead, reason: "not_found", code: 404, describes: "dialog.not.found"},
		{name: "chat not found", recipient: "c3", kind: delivery.RecipientDead, reason: "not_found", code: 404, describes: "chat.not.found"},
		{name: "unrecognised 403", recipient: "u4", kind: delivery.RecipientDead, reason: "forbidden", code: 403, unrecognised: true, describes: "access.denied: Access denied"},
		{name: "5xx page", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}}, recipient: "u10", kind: delivery.Transient, reason: "server", code: 502, maybe: true},
		{name: "503", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultJSON5xx, Status: 503}}, recipient: "u10", kind: delivery.Transient, reason: "server", code: 503, describes: "service.unavailable"},
		{name: "dropped after delivery", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}}, recipient: "u10", kind: delivery.Transient, reason: "network", maybe: true},
		{name: "too long", recipient: "u10", text: strings.Repeat("я", maxapi.MaxTextLength+1), kind: delivery.Rejected, reason: "content"},
		{name: "bad recipient", recipient: "x10", kind: delivery.Rejected, reason: "bad_recipient"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.States = states
			b := setup(t, cfg, maxchannel.Config{RetryAfter: 1500 * time.Millisecond})
			if tt.prepare != nil {
				tt.prepare(t, b.emu)
			}
			text := tt.text
			if text == "" {
				text = "Order A1 accepted"
			}
			o := b.ch.Send(t.Context(), delivery.NewAttempt(note(text), tt.recipient, nil))
			if o.Kind != tt.kind || o.Reason != tt.reason || o.Code != tt.code || o.Delay != tt.delay || o.MaybeDelivered != tt.maybe ||
				o.Unrecognised != tt.unrecognised || !strings.Contains(o.Description, tt.describes) {
				t.Errorf("outcome %+v, want %v (%s), code %d, delay %v, maybe delivered %v, unrecognised %v, description with %q",
					o, tt.kind, tt.reason, tt.code, tt.delay, tt.maybe, tt.unrecognised, tt.describes)
			}
			if strings.Contains(fmt.Sprintf("%+v", o), token) {
				t.Errorf("outcome %+v contains the token", o)
			}
		})
	}
}

// pause makes the emulator answer the next request with a 429 and
// Retry-After: seconds.
func pause(seconds int64) func(*testing.T, *emulator.Emulator) {
	return func(t *testing.T, e *emulator.Emulator) {
		t.Helper()
		if err := e.OpenPause(emulator.PauseRequest{RetryAfter: seconds}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnrecognisedAnswers covers the answers the emulator does not
// give, from a server that answers them: an unrecognised 400 is a
// permanent failure of the message, a 405 halts.
func TestUnrecognisedAnswers(t *testing.T) {
	t.Parallel()
	answers := map[string]struct {
		status int
		body   string
	}{
		"/bad":     {400, `{"code":"message.too.fancy","message":"something new"}`},
		"/payload": {400, `{"code":"proto.payload","message":"invalid text"}`},
		"/other":   {409, `{"code":"conflict","message":"x"}`},
		"/method":  {405, `{"code":"method.not.allowed","message":"x"}`},
		"/html404": {404, `<html><title>404 Not Found</title></html>`},
		"/html403": {403, `<html><title>403 Forbidden</title></html>`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[strings.TrimSuffix(r.URL.Path, "/messages")]
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		path         string
		kind         delivery.OutcomeKind
		reason       string
		unrecognised bool
	}{
		{"/bad", delivery.Rejected, "bad_request", true},
		{"/payload", delivery.Rejected, "invalid_request", false},
		{"/other", delivery.Rejected, "client_error", true},
		{"/method", delivery.Halt, "method_not_allowed", false},
		{"/html404", delivery.Halt, "endpoint_not_found", false},
		{"/html403", delivery.Transient, "bad_response", false},
	} {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			ch := newChannel(t, srv.URL+tt.path, token, maxchannel.Config{})
			o := ch.Send(t.Context(), delivery.NewAttempt(note("x"), "u1", nil))
			if o.Kind != tt.kind || o.Reason != tt.reason || o.Unrecognised != tt.unrecognised || o.Code != answers[tt.path].status {
				t.Errorf("outcome %+v, want %v (%s), unrecognised %v", o, tt.kind, tt.reason, tt.unrecognised)
			}
		})
	}
}

func TestWrongTokenHalts(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{}, maxchannel.Config{})
	wrong := newChannel(t, b.srv.URL, "not-"+token, maxchannel.Config{})
	o := wrong.Send(t.Context(), delivery.NewAttempt(note("x"), "u1", nil))
	if o.Kind != delivery.Halt || o.Reason != "unauthorized" || o.Code != 401 {
		t.Errorf("outcome %+v, want halt (unauthorized)", o)
	}
	if err := wrong.Probe(t.Context()); !errors.Is(err, maxapi.ErrUnauthorized) {
		t.Errorf("Probe with a wrong token = %v, want ErrUnauthorized", err)
	}
	if err := b.ch.Probe(t.Context()); err != nil {
		t.Errorf("Probe: %v", err)
	}
	if st := b.emu.Stats(); st.ByEndpoint[emulator.EndpointMe] != 2 {
		t.Errorf("GET /me called %d times, want 2 (the probes)", st.ByEndpoint[emulator.EndpointMe])
	}
}

// TestNotAdmittedIsNotSent checks that Send asks the attempt's admission and
// that a refusal reaches nobody.
func TestNotAdmittedIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{}, maxchannel.Config{})
	asked := 0
	refuse := func() error {
		asked++
		return &delivery.NotAdmittedError{Reason: "paused"}
	}
	o := b.ch.Send(t.Context(), delivery.NewAttempt(note("x"), "u1", refuse))
	if o.Kind != delivery.NotSent || asked == 0 {
		t.Errorf("outcome %+v after %d admission checks, want not sent after asking", o, asked)
	}
	if st := b.emu.Stats(); st.Requests != 0 {
		t.Errorf("the emulator saw %d requests, want none", st.Requests)
	}
}

func TestCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{}, maxchannel.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if o := b.ch.Send(ctx, delivery.NewAttempt(note("x"), "u1", nil)); o.Kind != delivery.Canceled || o.MaybeDelivered {
		t.Errorf("outcome %+v, want canceled before anything was sent", o)
	}
}

// A probe answered with a 429 says how long to wait, so that the worker
// starts paused instead of sending inside the pause (found by the long
// chaos run: a max-worker restarted in a pause sent at once).
func TestProbeInAPauseIsRateLimited(t *testing.T) {
	b := setup(t, emulator.Config{}, maxchannel.Config{})
	if err := b.ch.Probe(context.Background()); err != nil {
		t.Fatalf("probe: %v", err)
	}
	pause(3)(t, b.emu)
	err := b.ch.Probe(context.Background())
	var limited *delivery.RateLimitedError
	if !errors.As(err, &limited) || limited.RetryAfter != 3*time.Second || limited.At.IsZero() {
		t.Fatalf("probe in a pause: %v, want a RateLimitedError of 3s", err)
	}
}
