package sms_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/channel/sms"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/smstext"
	"github.com/tgnotify/tgnotify/pkg/twilio"
	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

const (
	accountSID = "AC0123456789abcdef0123456789abcdef"
	authToken  = "f00dfeedf00dfeedf00dfeedf00dfeed"
	sender     = "+15005550006"
	phone      = "+79991234567"
)

// syncBuffer collects log output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bundle is the channel and the emulator it sends to over real HTTP.
type bundle struct {
	emu  *emulator.Emulator
	ch   *sms.Channel
	logs *syncBuffer
}

// setup starts an emulator with ecfg and a channel with cfg sending to it.
// At the end of the test it checks that no log line showed the number or
// a credential.
func setup(t *testing.T, cfg sms.Config, ecfg emulator.Config, opts ...twilio.Option) *bundle {
	t.Helper()
	ecfg.AccountSID, ecfg.AuthToken = accountSID, authToken
	emu, err := emulator.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := twilio.New(accountSID, authToken,
		append([]twilio.Option{twilio.WithBaseURL(srv.URL), twilio.WithFrom(sender), twilio.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		emu.Close()
		srv.Close()
		assertClean(t, "the logs", logs.String())
	})
	ch, err := sms.New(cfg, client, logger)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{emu: emu, ch: ch, logs: logs}
}

func assertClean(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{phone, phone[1:], phone[:9], accountSID, authToken} {
		if strings.Contains(s, secret) {
			t.Errorf("%s show %q: %s", what, secret, s)
		}
	}
}

func notification(text string) notify.Notification {
	return notify.Notification{Key: "order:A1:accepted", Phone: phone, Text: text, ParseMode: notify.ParseModeHTML, Route: []notify.Channel{notify.ChannelSMS}}
}

func (b *bundle) send(t *testing.T, n notify.Notification) delivery.Outcome {
	t.Helper()
	token, err := b.ch.Recipient(n)
	if err != nil {
		t.Fatal(err)
	}
	return b.ch.Send(context.Background(), delivery.NewAttempt(n, token, nil))
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t, sms.Config{}, emulator.Config{})
	o := b.send(t, notification("<b>Order A1 accepted</b>\nHello, Ann! We have received your order:\n• Tea × 2 — 7.00\n<b>Total: 7.00</b>"))
	if o.Kind != delivery.Delivered || !strings.HasPrefix(o.ProviderID, "SM") {
		t.Fatalf("outcome %+v, want delivered with a message sid", o)
	}
	ms := b.emu.Messages()
	if len(ms) != 1 {
		t.Fatalf("emulator has %d messages, want 1", len(ms))
	}
	want := "Order A1 accepted\nHello, Ann! We have received your order:\n- Tea x 2 - 7.00\nTotal: 7.00"
	if m := ms[0]; m.To != phone || m.Body != want || m.Encoding != "GSM-7" || m.NumSegments != 1 || m.SID != o.ProviderID {
		t.Errorf("emulator received %+v, want the plain text %q in one GSM-7 segment", m, want)
	}
}

// A long notification is shortened to MaxSegments, keeping its link.
func TestShortened(t *testing.T) {
	t.Parallel()
	const link = "https://shop.example/orders/A1"
	long := "<b>Заказ A1 принят</b>\n" + strings.Repeat("Чай зелёный × 2 — 7.00\n", 30) + `<a href="` + link + `">Отследить заказ</a>`
	for _, max := range []int{1, 2, 3} {
		b := setup(t, sms.Config{MaxSegments: max}, emulator.Config{})
		if o := b.send(t, notification(long)); o.Kind != delivery.Delivered {
			t.Fatalf("max %d: outcome %+v", max, o)
		}
		m := b.emu.Messages()[0]
		if m.NumSegments > max || m.Encoding != "UCS-2" || !strings.HasPrefix(m.Body, "Заказ A1 принят\n") || !strings.HasSuffix(m.Body, "…\n"+link) {
			t.Errorf("max %d: emulator received %d segments (%s): %q", max, m.NumSegments, m.Encoding, m.Body)
		}
	}
}

// Every answer maps to its outcome.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	numbers := func(s emulator.NumberState) emulator.Config {
		return emulator.Config{Numbers: map[string]emulator.NumberState{phone: s}}
	}
	tests := []struct {
		name         string
		cfg          emulator.Config
		prepare      func(b *bundle)
		opts         []twilio.Option
		kind         delivery.OutcomeKind
		reason       string
		code         int
		unrecognised bool
		maybe        bool
		delay        time.Duration
	}{
		{name: "invalid number", cfg: numbers(emulator.NumberInvalid), kind: delivery.RecipientDead, reason: "invalid_number", code: 21211},
		{name: "unsubscribed", cfg: numbers(emulator.NumberUnsubscribed), kind: delivery.RecipientDead, reason: "unsubscribed", code: 21610},
		{name: "not mobile", cfg: numbers(emulator.NumberNotMobile), kind: delivery.RecipientDead, reason: "not_mobile", code: 21614},
		{name: "unverified", cfg: numbers(emulator.NumberUnverified), kind: delivery.RecipientDead, reason: "unverified", code: 21608},
		{name: "region not permitted", cfg: emulator.Config{BlockedRegions: []string{"+7"}}, kind: delivery.RecipientDead, reason: "region_not_permitted", code: 21408},
		{name: "unrecognised 403", cfg: numbers(emulator.NumberForbidden), kind: delivery.RecipientDead, reason: "forbidden", code: 20403, unrecognised: true},
		{name: "unrecognised 400", cfg: numbers(emulator.NumberUnreachable), kind: delivery.Rejected, reason: "bad_request", code: 21612, unrecognised: true},
		{name: "sender not owned", cfg: emulator.Config{Senders: []string{"+15005550001"}}, kind: delivery.Rejected, reason: "sender", code: 21606},
		{name: "429", prepare: func(b *bundle) { _ = b.emu.OpenPause(4 * time.Second) }, kind: delivery.RetryAfter, reason: "rate_limited", code: 20429, delay: 4 * time.Second},
		{name: "credentials rejected", prepare: func(b *bundle) { _ = b.emu.SetAccountStatus(emulator.AccountSuspended) }, kind: delivery.Halt, reason: "unauthorized", code: 20003},
		{name: "server error", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}}, kind: delivery.Transient, reason: "server", code: 20500},
		{name: "proxy page", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultHTML5xx, Status: 503}}, kind: delivery.Transient, reason: "server", code: 503},
		{name: "created, answer lost", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}}, kind: delivery.Transient, reason: "network", maybe: true},
		{name: "timeout", cfg: emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}}, opts: []twilio.Option{twilio.WithTimeout(100 * time.Millisecond)}, kind: delivery.Transient, reason: "timeout", maybe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sms.Config{}, tt.cfg, tt.opts...)
			if tt.prepare != nil {
				tt.prepare(b)
			}
			o := b.send(t, notification("Order A1 accepted"))
			if o.Kind != tt.kind || o.Reason != tt.reason || o.Code != tt.code || o.Unrecognised != tt.unrecognised ||
				o.MaybeDelivered != tt.maybe || o.Delay != tt.delay {
				t.Errorf("outcome %+v, want %s %s code %d unrecognised %v maybe %v delay %s",
					o, tt.kind, tt.reason, tt.code, tt.unrecognised, tt.maybe, tt.delay)
			}
			if o.Kind != delivery.Transient && o.Description == "" {
				t.Errorf("outcome %+v has no description", o)
			}
			assertClean(t, "the description", o.Description)
		})
	}
}

// A refused admission sends nothing; a canceled context is not a failure.
func TestAdmissionAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, sms.Config{}, emulator.Config{})
	n := notification("Order A1 accepted")
	token, _ := b.ch.Recipient(n)
	paused := &delivery.NotAdmittedError{Reason: "paused"}
	o := b.ch.Send(context.Background(), delivery.NewAttempt(n, token, func() error { return paused }))
	if o.Kind != delivery.NotSent {
		t.Errorf("refused attempt: %+v, want not sent", o)
	}
	if s := b.emu.Stats(); s.Requests != 0 {
		t.Errorf("the emulator saw %d requests, want 0", s.Requests)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if o := b.ch.Send(ctx, delivery.NewAttempt(n, token, nil)); o.Kind != delivery.Canceled {
		t.Errorf("canceled attempt: %+v, want canceled", o)
	}
}

// Text that is nothing but markup is rejected without a request, and a
// notification without a phone is not sent.
func TestNothingToSend(t *testing.T) {
	t.Parallel()
	b := setup(t, sms.Config{}, emulator.Config{})
	n := notification("<b> </b>")
	if o := b.send(t, n); o.Kind != delivery.Rejected || o.Reason != "content" {
		t.Errorf("markup only: %+v, want rejected as content", o)
	}
	n.Phone = ""
	if o := b.ch.Send(context.Background(), delivery.NewAttempt(n, "p0", nil)); o.Kind != delivery.Rejected || o.Reason != "bad_recipient" {
		t.Errorf("no phone: %+v, want rejected", o)
	}
	if s := b.emu.Stats(); s.Requests != 0 {
		t.Errorf("the emulator saw %d requests, want 0", s.Requests)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := setup(t, sms.Config{}, emulator.Config{})
	if err := b.ch.Probe(context.Background()); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	_ = b.emu.SetAccountStatus(emulator.AccountClosed)
	err := b.ch.Probe(context.Background())
	if !errors.Is(err, twilio.ErrUnauthorized) {
		t.Errorf("Probe of a closed account: %v, want ErrUnauthorized", err)
	}
	assertClean(t, "the probe error", err.Error())
	_ = b.emu.SetAccountStatus(emulator.AccountActive)
	if err := b.ch.Probe(context.Background()); err != nil {
		t.Errorf("Probe after reactivation: %v", err)
	}
}

// A Probe against an account that answers but is not active fails.
func TestProbeInactiveAccount(t *testing.T) {
	t.Parallel()
	ch, err := sms.New(sms.Config{}, fakeSender{status: "suspended"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "suspended") {
		t.Errorf("Probe = %v, want an error naming the status", err)
	}
}

type fakeSender struct{ status string }

func (fakeSender) Send(context.Context, string, string) (*twilio.Message, error) { return nil, nil }
func (f fakeSender) FetchAccount(context.Context) (*twilio.Account, error) {
	return &twilio.Account{Status: f.status}, nil
}

func TestRecipient(t *testing.T) {
	ch, err := sms.New(sms.Config{}, fakeSender{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := ch.Recipient(notification("x"))
	if err != nil || token != "p"+notify.HashAddress(phone) {
		t.Errorf("Recipient = %q, %v; want p + the hash", token, err)
	}
	if _, err := ch.Recipient(notify.Notification{Key: "k", ChatID: 1, Text: "x"}); err == nil {
		t.Errorf("a notification without a phone has a recipient")
	}
	if ch.Name() != "sms" {
		t.Errorf("Name = %q", ch.Name())
	}
}

func TestLimits(t *testing.T) {
	for _, tt := range []struct {
		cfg       sms.Config
		rate, per rate.Limit
	}{
		{sms.Config{}, 0.5, 0.1},
		{sms.Config{SegmentsPerSecond: 100, MaxSegments: 1, RecipientPerMinute: 60}, 100, 1},
		{sms.Config{SegmentsPerSecond: 3, MaxSegments: 3}, 1, 0.1},
	} {
		ch, err := sms.New(tt.cfg, fakeSender{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := ch.Limits()
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		if l.Rate != tt.rate || l.RecipientRate("p1") != tt.per {
			t.Errorf("%+v: limits %v and %v per recipient, want %v and %v", tt.cfg, l.Rate, l.RecipientRate("p1"), tt.rate, tt.per)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	err := sms.Config{SegmentsPerSecond: -1, RecipientPerMinute: -2, MaxSegments: 11}.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *delivery.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *delivery.FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, ","); got != "SegmentsPerSecond,RecipientPerMinute,MaxSegments" {
		t.Errorf("fields %s", got)
	}
	if err := (sms.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	if _, err := sms.New(sms.Config{MaxSegments: -1}, fakeSender{}, nil); err == nil {
		t.Errorf("New accepted MaxSegments -1")
	}
	if _, err := sms.New(sms.Config{}, nil, nil); err == nil {
		t.Errorf("New accepted a nil client")
	}
	ch, _ := sms.New(sms.Config{}, fakeSender{}, nil)
	if c := ch.Config(); c.SegmentsPerSecond != sms.DefaultSegmentsPerSecond || c.RecipientPerMinute != sms.DefaultRecipientPerMinute || c.MaxSegments != sms.DefaultMaxSegments {
		t.Errorf("defaults %+v", c)
	}
}

// The text follows the notification's parse mode.
func TestText(t *testing.T) {
	ch, _ := sms.New(sms.Config{}, fakeSender{}, nil)
	for _, tt := range []struct {
		mode notify.ParseMode
		text string
		want string
	}{
		{notify.ParseModeHTML, "<b>A1</b> &amp; co", "A1 & co"},
		{notify.ParseModeMarkdownV2, `*A1* \& co`, "A1 & co"},
		{notify.ParseModeNone, "<b>A1</b>", "<b>A1</b>"},
	} {
		n := notification(tt.text)
		n.ParseMode = tt.mode
		if got := ch.Text(n); got != tt.want {
			t.Errorf("%q in %q: %q, want %q", tt.text, tt.mode, got, tt.want)
		}
		if smstext.Segments(ch.Text(n)) > 2 {
			t.Errorf("over budget")
		}
	}
}

// The first http(s) button's URL is the SMS's link: appended when it fits,
// kept when the text must be cut. The SMS body, when given, is sent as
// plain text.
func TestButtonAndBody(t *testing.T) {
	t.Parallel()
	b := setup(t, sms.Config{MaxSegments: 1}, emulator.Config{})
	const track = "https://shop.example/o/A1"
	n := notification("<b>Order A1 shipped</b>")
	n.Buttons = [][]notify.Button{{{Text: "Bot", URL: "tg://resolve?domain=shop_bot"}, {Text: "Track", URL: track}}, {{Text: "Help", URL: "https://shop.example/help"}}}
	if got, want := b.ch.Text(n), "Order A1 shipped\n"+track; got != want {
		t.Errorf("short text: %q, want %q", got, want)
	}
	n.Text = "<b>Order A1 shipped</b> " + strings.Repeat("with many words ", 20) + `<a href="https://shop.example/other">other</a>`
	got := b.ch.Text(n)
	if !strings.HasSuffix(got, "...\n"+track) || strings.Contains(got, "/other") || smstext.Segments(got) != 1 {
		t.Errorf("long text: %q, want one segment ending in the button's link", got)
	}
	n.Text = "<b>Order A1</b>"
	n.Bodies.SMS = &notify.SMSBody{Text: "Ann <script> & *co*: order A1 shipped"}
	if o := b.send(t, n); o.Kind != delivery.Delivered {
		t.Fatalf("outcome %+v", o)
	}
	if m := b.emu.Messages()[0]; m.Body != "Ann <script> & *co*: order A1 shipped\n"+track {
		t.Errorf("emulator received %q, want the SMS body as written and the link", m.Body)
	}
}

// A probe answered with a 429 says how long to wait, so that the worker
// starts paused instead of sending inside the pause (found by the long
// chaos run: an sms-worker restarted in a pause sent at once).
func TestProbeInAPauseIsRateLimited(t *testing.T) {
	b := setup(t, sms.Config{}, emulator.Config{})
	if err := b.ch.Probe(context.Background()); err != nil {
		t.Fatalf("probe: %v", err)
	}
	_ = b.emu.OpenPause(4 * time.Second)
	err := b.ch.Probe(context.Background())
	var limited *delivery.RateLimitedError
	if !errors.As(err, &limited) || limited.RetryAfter != 4*time.Second || limited.At.IsZero() {
		t.Fatalf("probe in a pause: %v, want a RateLimitedError of 4s", err)
	}
}
