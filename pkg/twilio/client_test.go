package twilio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/testclock"
	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/pkg/twilio"
	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// Test credentials: not secrets, but treated as such by the client, so the
// tests check that neither ever shows.
const (
	testSID   = "AC0123456789abcdef0123456789abcdef"
	testToken = "f00dfeedf00dfeedf00dfeedf00dfeed"
	testFrom  = "+15005550006"
	testTo    = "+79991234567"
)

// newClock is a manual clock for the emulator's Config.Now.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// bundle is a client talking to an emulator over real HTTP.
type bundle struct {
	emu    *emulator.Emulator
	srv    *httptest.Server
	client *twilio.Client
	logs   *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
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

// setup starts an emulator with cfg (credentials filled in) and a client
// for it that logs at debug level into bundle.logs.
func setup(t *testing.T, cfg emulator.Config, opts ...twilio.Option) *bundle {
	t.Helper()
	cfg.AccountSID, cfg.AuthToken = testSID, testToken
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() {
		emu.Close()
		srv.Close()
	})
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	all := append([]twilio.Option{twilio.WithBaseURL(srv.URL), twilio.WithFrom(testFrom), twilio.WithLogger(logger)}, opts...)
	client, err := twilio.New(testSID, testToken, all...)
	if err != nil {
		t.Fatalf("twilio.New: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return &bundle{emu: emu, srv: srv, client: client, logs: logs}
}

// assertClean fails when s shows a credential or the recipient's number.
func assertClean(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{testSID, testToken, testTo, testTo[1:], testTo[:9]} {
		if strings.Contains(s, secret) {
			t.Errorf("%s shows %q: %s", what, secret, s)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	from := twilio.WithFrom(testFrom)
	for _, tt := range []struct {
		name       string
		sid, token string
		opts       []twilio.Option
	}{
		{"empty SID", "", testToken, []twilio.Option{from}},
		{"SID of an API key", "SK0123456789abcdef0123456789abcdef", testToken, []twilio.Option{from}},
		{"short SID", "AC0123", testToken, []twilio.Option{from}},
		{"empty token", testSID, "", []twilio.Option{from}},
		{"token with a space", testSID, "abc def", []twilio.Option{from}},
		{"no sender", testSID, testToken, nil},
		{"two senders", testSID, testToken, []twilio.Option{from, twilio.WithMessagingService("MG0123456789abcdef0123456789abcdef")}},
		{"bad From", testSID, testToken, []twilio.Option{twilio.WithFrom("+0123")}},
		{"alphanumeric From without a letter", testSID, testToken, []twilio.Option{twilio.WithFrom("12 34")}},
		{"bad messaging service", testSID, testToken, []twilio.Option{twilio.WithMessagingService("MG12")}},
		{"base URL without scheme", testSID, testToken, []twilio.Option{from, twilio.WithBaseURL("api.twilio.com")}},
		{"base URL with a query", testSID, testToken, []twilio.Option{from, twilio.WithBaseURL("https://api.twilio.com/?x=1")}},
		{"zero timeout", testSID, testToken, []twilio.Option{from, twilio.WithTimeout(0)}},
		{"nil HTTP client", testSID, testToken, []twilio.Option{from, twilio.WithHTTPClient(nil)}},
		{"nil logger", testSID, testToken, []twilio.Option{from, twilio.WithLogger(nil)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := twilio.New(tt.sid, tt.token, tt.opts...)
			if err == nil {
				t.Fatalf("New succeeded: %v", c)
			}
			assertClean(t, "the error", err.Error())
		})
	}
	for _, f := range []string{testFrom, "12345", "ShopName"} {
		if _, err := twilio.New(testSID, testToken, twilio.WithFrom(f)); err != nil {
			t.Errorf("WithFrom(%q): %v", f, err)
		}
	}
}

func TestSendCreatesAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	body := "Order A1 accepted. Total: 7.00 €"
	msg, err := b.client.Send(context.Background(), testTo, body)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if !strings.HasPrefix(msg.SID, "SM") || len(msg.SID) != 34 || msg.Status != "queued" || msg.NumSegments != 1 || msg.DateCreated.IsZero() {
		t.Errorf("got %+v, want a queued message of one segment with a sid", msg)
	}
	got := b.emu.Messages()
	if len(got) != 1 {
		t.Fatalf("emulator has %d messages, want 1", len(got))
	}
	if m := got[0]; m.SID != msg.SID || m.To != testTo || m.From != testFrom || m.Body != body || m.NumSegments != 1 || m.Encoding != "GSM-7" {
		t.Errorf("emulator recorded %+v", m)
	}
	assertClean(t, "the message", fmt.Sprintf("%+v", msg))
}

func TestSendThroughAMessagingService(t *testing.T) {
	t.Parallel()
	const service = "MG0123456789abcdef0123456789abcdef"
	b := setup(t, emulator.Config{})
	c, err := twilio.New(testSID, testToken, twilio.WithBaseURL(b.srv.URL), twilio.WithMessagingService(service))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Send(context.Background(), testTo, strings.Repeat("Заказ принят. ", 10))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if msg.Status != "accepted" || msg.NumSegments != 0 {
		t.Errorf("got %+v, want accepted with 0 segments, as Twilio answers for a Messaging Service", msg)
	}
	if m := b.emu.Messages()[0]; m.MessagingServiceSID != service || m.From != "" || m.Encoding != "UCS-2" || m.NumSegments != 3 {
		t.Errorf("emulator recorded %+v", m)
	}
}

func TestFetchAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{FriendlyName: "Shop"})
	a, err := b.client.FetchAccount(context.Background())
	if err != nil {
		t.Fatalf("FetchAccount: %v", err)
	}
	if !a.Active() || a.FriendlyName != "Shop" || a.Type != "Full" {
		t.Errorf("got %+v, want the active account Shop", a)
	}
	assertClean(t, "the account", fmt.Sprintf("%+v %#v", a, a))
	if err := b.emu.SetAccountStatus(emulator.AccountSuspended); err != nil {
		t.Fatal(err)
	}
	_, err = b.client.FetchAccount(context.Background())
	if !errors.Is(err, twilio.ErrUnauthorized) {
		t.Errorf("FetchAccount of a suspended account: %v, want ErrUnauthorized", err)
	}
}

// Every answer the emulator can give maps to its typed error, sentinel and
// decision, and no error text shows a credential or the number.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	type want struct {
		sentinel     error
		action       twilio.Action
		reason       string
		code         int
		unrecognised bool
		maybe        bool
		retryAfter   time.Duration
	}
	tests := []struct {
		name  string
		cfg   emulator.Config
		setup func(t *testing.T, b *bundle)
		opts  []twilio.Option
		ctx   func() context.Context
		want  want
	}{
		{
			name: "invalid number",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberInvalid}},
			want: want{sentinel: twilio.ErrInvalidNumber, action: twilio.ActionRecipientDead, reason: "invalid_number", code: 21211},
		},
		{
			name: "unsubscribed",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberUnsubscribed}},
			want: want{sentinel: twilio.ErrUnsubscribed, action: twilio.ActionRecipientDead, reason: "unsubscribed", code: 21610},
		},
		{
			name: "not a mobile number",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberNotMobile}},
			want: want{sentinel: twilio.ErrNotMobile, action: twilio.ActionRecipientDead, reason: "not_mobile", code: 21614},
		},
		{
			name: "unverified on a trial account",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberUnverified}},
			want: want{sentinel: twilio.ErrUnverified, action: twilio.ActionRecipientDead, reason: "unverified", code: 21608},
		},
		{
			name: "region not permitted",
			cfg:  emulator.Config{BlockedRegions: []string{"+7"}},
			want: want{sentinel: twilio.ErrRegionNotPermitted, action: twilio.ActionRecipientDead, reason: "region_not_permitted", code: 21408},
		},
		{
			name: "unrecognised 400",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberUnreachable}},
			want: want{sentinel: twilio.ErrBadRequestUnknown, action: twilio.ActionRejected, reason: "bad_request", code: 21612, unrecognised: true},
		},
		{
			name: "unrecognised 403",
			cfg:  emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberForbidden}},
			want: want{sentinel: twilio.ErrForbiddenUnknown, action: twilio.ActionRecipientDead, reason: "forbidden", code: 20403, unrecognised: true},
		},
		{
			name: "sender not owned",
			cfg:  emulator.Config{Senders: []string{"+15005550001"}},
			want: want{sentinel: twilio.ErrSender, action: twilio.ActionRejected, reason: "sender", code: 21606},
		},
		{
			name: "wrong auth token",
			opts: []twilio.Option{},
			setup: func(t *testing.T, b *bundle) {
				c, err := twilio.New(testSID, "0000feedf00dfeedf00dfeedf00dfeed", twilio.WithBaseURL(b.srv.URL), twilio.WithFrom(testFrom))
				if err != nil {
					t.Fatal(err)
				}
				b.client = c
			},
			want: want{sentinel: twilio.ErrUnauthorized, action: twilio.ActionHalt, reason: "unauthorized", code: 20003},
		},
		{
			name:  "suspended account",
			setup: func(t *testing.T, b *bundle) { _ = b.emu.SetAccountStatus(emulator.AccountSuspended) },
			want:  want{sentinel: twilio.ErrUnauthorized, action: twilio.ActionHalt, reason: "unauthorized", code: 20003},
		},
		{
			name: "wrong base URL",
			setup: func(t *testing.T, b *bundle) {
				c, err := twilio.New(testSID, testToken, twilio.WithBaseURL(b.srv.URL+"/v1"), twilio.WithFrom(testFrom))
				if err != nil {
					t.Fatal(err)
				}
				b.client = c
			},
			want: want{sentinel: twilio.ErrNotFound, action: twilio.ActionHalt, reason: "not_found", code: 20404},
		},
		{
			name:  "rate limited with Retry-After",
			setup: func(t *testing.T, b *bundle) { _ = b.emu.OpenPause(3 * time.Second) },
			want:  want{sentinel: twilio.ErrRateLimited, action: twilio.ActionRetryAfter, reason: "rate_limited", code: 20429, retryAfter: 3 * time.Second},
		},
		{
			name:  "rate limited without Retry-After",
			cfg:   emulator.Config{Limits: emulator.Limits{NoRetryAfter: true}},
			setup: func(t *testing.T, b *bundle) { _ = b.emu.OpenPause(3 * time.Second) },
			want:  want{sentinel: twilio.ErrRateLimited, action: twilio.ActionRetryAfter, reason: "rate_limited", code: 20429, retryAfter: twilio.DefaultRetryAfter},
		},
		{
			name: "sender queue full",
			cfg:  emulator.Config{Limits: emulator.Limits{Enabled: true, SegmentsPerSecond: 1, QueueWindow: time.Second}, Now: newClock().Now},
			setup: func(t *testing.T, b *bundle) {
				for range 3 { // the fake clock stands still: 0s, 1s, 2s of backlog
					if _, err := b.client.Send(context.Background(), "+15005550010", "hi"); err != nil && !errors.Is(err, twilio.ErrQueueFull) {
						t.Fatal(err)
					}
				}
			},
			want: want{sentinel: twilio.ErrQueueFull, action: twilio.ActionRetryAfter, reason: "queue_full", code: 21611, retryAfter: twilio.QueueFullRetryAfter},
		},
		{
			name: "Twilio 500",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}},
			want: want{sentinel: twilio.ErrServer, action: twilio.ActionBackoff, reason: "server", code: 20500},
		},
		{
			name: "Twilio 503",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx, Status: 503}},
			want: want{sentinel: twilio.ErrServer, action: twilio.ActionBackoff, reason: "server", code: 20503},
		},
		{
			name: "gateway page 502",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultHTML5xx}},
			want: want{sentinel: twilio.ErrBadResponse, action: twilio.ActionBackoff, reason: "server", code: 502, maybe: true},
		},
		{
			name: "connection dropped",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDrop}},
			want: want{sentinel: twilio.ErrNetwork, action: twilio.ActionBackoff, reason: "network", maybe: true},
		},
		{
			name: "created, answer lost",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}},
			want: want{sentinel: twilio.ErrMaybeDelivered, action: twilio.ActionBackoff, reason: "network", maybe: true},
		},
		{
			name: "never answered",
			cfg:  emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}},
			opts: []twilio.Option{twilio.WithTimeout(200 * time.Millisecond)},
			want: want{sentinel: twilio.ErrTimeout, action: twilio.ActionBackoff, reason: "timeout", maybe: true},
		},
		{
			name: "caller's context ended",
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			want: want{sentinel: context.Canceled, action: twilio.ActionCanceled, reason: "canceled"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.cfg, tt.opts...)
			if tt.setup != nil {
				tt.setup(t, b)
			}
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			msg, err := b.client.Send(ctx, testTo, "Order A1 accepted")
			if err == nil {
				t.Fatalf("Send succeeded: %+v", msg)
			}
			if !errors.Is(err, tt.want.sentinel) {
				t.Errorf("error %v (%T) does not match %v", err, err, tt.want.sentinel)
			}
			d := twilio.Classify(err)
			if d.Action != tt.want.action || d.Reason != tt.want.reason || d.Code != tt.want.code ||
				d.Unrecognised != tt.want.unrecognised || d.MaybeDelivered != tt.want.maybe || d.RetryAfter != tt.want.retryAfter {
				t.Errorf("Classify = %+v, want %+v", d, tt.want)
			}
			assertClean(t, "the error", err.Error())
			assertClean(t, "the decision", fmt.Sprintf("%+v", d))
			assertClean(t, "the log", b.logs.String())
		})
	}
}

// The typed errors carry Twilio's answer, with the number masked.
func TestErrorCarriesTwilioAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{Numbers: map[string]emulator.NumberState{testTo: emulator.NumberInvalid}})
	_, err := b.client.Send(context.Background(), testTo, "hi")
	e, ok := errors.AsType[*twilio.Error](err)
	if !ok {
		t.Fatalf("error %v is %T, want *twilio.Error", err, err)
	}
	if e.Status != 400 || e.Code != 21211 || e.MoreInfo != "https://www.twilio.com/docs/errors/21211" || !e.Known() {
		t.Errorf("got %+v", e)
	}
	if want := "The 'To' number +***67 is not a valid phone number."; e.Message != want {
		t.Errorf("Message = %q, want %q", e.Message, want)
	}
}

// A request the admission check refuses never reaches the emulator, on a
// fresh connection or a kept-alive one.
func TestAdmissionRefusalNeverReachesTwilio(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	refuse := errors.New("paused")
	send := func(admit func() error) error {
		_, err := b.client.Send(twilio.WithAdmission(context.Background(), admit), testTo, "hi")
		return err
	}
	for round := range 2 { // round 1 reuses the connection round 0 left idle
		before := b.emu.Stats().Requests
		err := send(func() error { return refuse })
		if !errors.Is(err, refuse) || !errors.Is(err, twilio.ErrNotSent) {
			t.Fatalf("round %d: refused Send returned %v, want a NotSentError wrapping the refusal", round, err)
		}
		if d := twilio.Classify(err); d.Action != twilio.ActionNotSent {
			t.Errorf("Classify = %+v, want not sent", d)
		}
		if n := b.emu.Stats().Requests - before; n != 0 {
			t.Fatalf("round %d: the emulator saw %d refused requests", round, n)
		}
		if err := send(func() error { return nil }); err != nil {
			t.Fatalf("round %d: admitted Send: %v", round, err)
		}
	}
	if n := len(b.emu.Messages()); n != 2 {
		t.Errorf("emulator created %d messages, want the 2 admitted", n)
	}
}

// A request that cannot be made is refused before it leaves.
func TestSendRefusesWhatTwilioWould(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	for _, tt := range []struct {
		name, to, body string
		reason         string
	}{
		{"no number", "", "hi", "bad_request"},
		{"empty body", testTo, " \n", "content"},
		{"body over 1600 characters", testTo, strings.Repeat("я", 1601), "content"},
	} {
		_, err := b.client.Send(context.Background(), tt.to, tt.body)
		if _, ok := errors.AsType[*twilio.RequestError](err); !ok {
			t.Errorf("%s: error %v, want a *RequestError", tt.name, err)
		}
		if d := twilio.Classify(err); d.Action != twilio.ActionRejected || d.Reason != tt.reason {
			t.Errorf("%s: Classify = %+v, want rejected %s", tt.name, d, tt.reason)
		}
	}
	if n := b.emu.Stats().Requests; n != 0 {
		t.Errorf("the emulator saw %d requests, want none", n)
	}
}

// The credentials never show when the client is printed or logged, nor in
// the error of a request that could not connect (whose URL has the SID).
func TestCredentialsNeverShow(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := twilio.New(testSID, testToken, twilio.WithBaseURL("http://"+addr), twilio.WithFrom(testFrom), twilio.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	_, sendErr := c.Send(context.Background(), testTo, "hi")
	if !errors.Is(sendErr, twilio.ErrNetwork) || errors.Is(sendErr, twilio.ErrMaybeDelivered) {
		t.Errorf("Send to a closed port: %v, want a network error that was not delivered", sendErr)
	}
	logger.Info("client", "client", c)
	for what, s := range map[string]string{
		"the error": sendErr.Error(),
		"%v":        fmt.Sprintf("%v", c),
		"%+v":       fmt.Sprintf("%+v", *c),
		"%#v":       fmt.Sprintf("%#v", c),
		"String":    c.String(),
		"the log":   logs.String(),
	} {
		assertClean(t, what, s)
	}
}

func TestMaskPhone(t *testing.T) {
	for in, want := range map[string]string{"+79991234567": "+***67", "+15005550006": "+***06", "7": "+***", "": "+***"} {
		if got := twilio.MaskPhone(in); got != want {
			t.Errorf("MaskPhone(%q) = %q, want %q", in, got, want)
		}
	}
}

// WithUserAgent names the sender in every request, which the emulator
// records for a request sent inside a pause and for the 429 that announced
// it; a bad User-Agent is refused.
func TestUserAgent(t *testing.T) {
	t.Parallel()
	from := twilio.WithFrom(testFrom)
	if _, err := twilio.New(testSID, testToken, from, twilio.WithUserAgent("")); err == nil {
		t.Error("New with an empty User-Agent succeeded")
	}
	if _, err := twilio.New(testSID, testToken, from, twilio.WithUserAgent("worker\nX-Injected: 1")); err == nil {
		t.Error("New with a User-Agent holding a newline succeeded")
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC).UnixNano())
	ua := useragent.Of("sms-worker", 42)
	b := setup(t, emulator.Config{Now: func() time.Time { return time.Unix(0, now.Load()).UTC() }}, twilio.WithUserAgent(ua))
	if err := b.emu.OpenPause(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := b.client.Send(t.Context(), testTo, "Order A1 accepted"); err == nil {
			t.Fatalf("Send %d inside the pause succeeded", i)
		}
		now.Add(int64(emulator.SenderReactionTime))
	}
	q := b.emu.Stats().InPauseRequests
	if len(q) != 1 || q[0].UserAgent != ua || q[0].To != testTo || q[0].Opener.UserAgent != ua || q[0].Opener.To != testTo {
		t.Errorf("requests sent inside the pause: %+v, want one to %s by %q after a 429 to the same", q, testTo, ua)
	}
}
