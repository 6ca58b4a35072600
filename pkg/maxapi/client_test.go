package maxapi_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

const testToken = "f9LHodD0cOKvYw8sYrLNLGbjqT8-client_test_token"

// bundle is a client talking to an emulator over real HTTP.
type bundle struct {
	emu    *emulator.Emulator
	srv    *httptest.Server
	client *maxapi.Client
}

// setup starts an emulator with cfg (Token filled in) and a client for it.
func setup(t *testing.T, cfg emulator.Config, opts ...maxapi.Option) *bundle {
	t.Helper()
	cfg.Token = testToken
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() {
		emu.Close()
		srv.Close()
	})
	client, err := maxapi.New(testToken, append([]maxapi.Option{maxapi.WithBaseURL(srv.URL)}, opts...)...)
	if err != nil {
		t.Fatalf("maxapi.New: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return &bundle{emu: emu, srv: srv, client: client}
}

// noToken fails the test when s contains the token.
func noToken(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, testToken) {
		t.Errorf("%s contains the token: %s", what, s)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noCerts := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(noCerts, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		token string
		opts  []maxapi.Option
	}{
		{"empty token", "", nil},
		{"token with a space", "abc def", nil},
		{"Bearer token", "Bearer " + testToken, nil},
		{"token with a newline", "abc\r\nX-Evil: 1", nil},
		{"huge token", strings.Repeat("a", 513), nil},
		{"base URL without scheme", testToken, []maxapi.Option{maxapi.WithBaseURL("platform-api2.max.ru")}},
		{"base URL with a query", testToken, []maxapi.Option{maxapi.WithBaseURL("https://platform-api2.max.ru/?x=1")}},
		{"zero timeout", testToken, []maxapi.Option{maxapi.WithTimeout(0)}},
		{"nil HTTP client", testToken, []maxapi.Option{maxapi.WithHTTPClient(nil)}},
		{"nil logger", testToken, []maxapi.Option{maxapi.WithLogger(nil)}},
		{"empty CA path", testToken, []maxapi.Option{maxapi.WithCAFile("")}},
		{"missing CA file", testToken, []maxapi.Option{maxapi.WithCAFile(filepath.Join(dir, "missing.pem"))}},
		{"CA file without certificates", testToken, []maxapi.Option{maxapi.WithCAFile(noCerts)}},
		{"CA file and HTTP client", testToken, []maxapi.Option{maxapi.WithCAFile(noCerts), maxapi.WithHTTPClient(http.DefaultClient)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := maxapi.New(tt.token, tt.opts...)
			if err == nil {
				t.Fatalf("New = %v, want an error", c)
			}
			noToken(t, "the error", err.Error())
		})
	}
	c, err := maxapi.New(testToken)
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if !strings.Contains(c.String(), maxapi.DefaultBaseURL) {
		t.Errorf("String() = %q, want the default base URL %s", c, maxapi.DefaultBaseURL)
	}
}

func TestSendMessageToAUser(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	m, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{
		UserID: 42, Text: "<b>Order #17</b> shipped", Format: maxapi.FormatHTML, Silent: true, DisableLinkPreview: true,
	})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if !strings.HasPrefix(m.MessageID, "mid.") || m.Seq != 1 || m.UserID != 42 || m.ChatType != "dialog" || m.Time.IsZero() || m.Text != "Order #17 shipped" {
		t.Errorf("got %+v, want message 1 in the dialog with user 42", m)
	}
	got := b.emu.Messages()
	if len(got) != 1 {
		t.Fatalf("the emulator recorded %d messages, want 1", len(got))
	}
	r := got[0]
	if r.MessageID != m.MessageID || r.UserID != 42 || r.Text != "<b>Order #17</b> shipped" || r.Format != "html" || r.Notify || !r.DisableLinkPreview {
		t.Errorf("the emulator recorded %+v, want the request as sent", r)
	}
}

// An image and link buttons are sent as MAX's image and inline_keyboard
// attachments.
func TestSendMessageWithAttachments(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	_, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{
		UserID: 42, Text: "Order #17 shipped", ImageURL: "https://cdn.shop.example/17.jpg",
		Buttons: [][]maxapi.LinkButton{{{Text: "Track", URL: "https://shop.example/17"}, {Text: "Help", URL: "https://shop.example/help"}}, {{Text: "Rate", URL: "https://shop.example/rate"}}},
	})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	r := b.emu.Messages()[0]
	want := [][]emulator.Button{
		{{Type: "link", Text: "Track", URL: "https://shop.example/17"}, {Type: "link", Text: "Help", URL: "https://shop.example/help"}},
		{{Type: "link", Text: "Rate", URL: "https://shop.example/rate"}},
	}
	if r.Attachments != 2 || len(r.Images) != 1 || r.Images[0] != "https://cdn.shop.example/17.jpg" || fmt.Sprint(r.Buttons) != fmt.Sprint(want) {
		t.Errorf("the emulator recorded %+v", r)
	}
}

func TestSendMessageToAChat(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	m, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{ChatID: -7001, Text: "plain *text*"})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if m.ChatID != -7001 || m.ChatType != "chat" {
		t.Errorf("got %+v, want chat -7001", m)
	}
	r := b.emu.RecipientMessages(emulator.Chat(-7001))
	if len(r) != 1 || r[0].Format != "" || !r[0].Notify || r[0].DisableLinkPreview {
		t.Errorf("the emulator recorded %+v, want plain text that notifies", r)
	}
}

func TestGetMe(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{BotID: 99, BotName: "Shop", BotUsername: "shop_bot"})
	bot, err := b.client.GetMe(t.Context())
	if err != nil {
		t.Fatalf("GetMe: %v", err)
	}
	if bot.UserID != 99 || bot.Name != "Shop" || bot.Username != "shop_bot" || !bot.IsBot {
		t.Errorf("got %+v, want bot 99", bot)
	}
}

func TestParamsAreCheckedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	for _, tt := range []struct {
		name   string
		p      maxapi.SendMessageParams
		field  string
		reason string
	}{
		{"no recipient", maxapi.SendMessageParams{Text: "x"}, "user_id", maxapi.ReasonBadRequest},
		{"two recipients", maxapi.SendMessageParams{UserID: 1, ChatID: 2, Text: "x"}, "user_id", maxapi.ReasonBadRequest},
		{"negative user", maxapi.SendMessageParams{UserID: -1, Text: "x"}, "user_id", maxapi.ReasonBadRequest},
		{"unknown format", maxapi.SendMessageParams{UserID: 1, Text: "x", Format: "MarkdownV2"}, "format", maxapi.ReasonBadRequest},
		{"empty text", maxapi.SendMessageParams{UserID: 1, Text: " \n"}, "text", maxapi.ReasonContent},
		{"invalid UTF-8", maxapi.SendMessageParams{UserID: 1, Text: "\xff"}, "text", maxapi.ReasonContent},
		{"too long", maxapi.SendMessageParams{UserID: 1, Text: strings.Repeat("ы", maxapi.MaxTextLength+1)}, "text", maxapi.ReasonContent},
		{"four link buttons a row", maxapi.SendMessageParams{UserID: 1, Text: "x", Buttons: [][]maxapi.LinkButton{make([]maxapi.LinkButton, 4)}}, "buttons[0]", maxapi.ReasonBadRequest},
		{"an empty row", maxapi.SendMessageParams{UserID: 1, Text: "x", Buttons: [][]maxapi.LinkButton{{}}}, "buttons[0]", maxapi.ReasonBadRequest},
		{"an empty label", maxapi.SendMessageParams{UserID: 1, Text: "x", Buttons: [][]maxapi.LinkButton{{{URL: "https://a.example"}}}}, "buttons[0][0].text", maxapi.ReasonBadRequest},
		{"a button without URL", maxapi.SendMessageParams{UserID: 1, Text: "x", Buttons: [][]maxapi.LinkButton{{{Text: "a"}}}}, "buttons[0][0].url", maxapi.ReasonBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.SendMessage(t.Context(), tt.p)
			pe, ok := errors.AsType[*maxapi.ParamsError](err)
			if !ok || pe.Field != tt.field || !errors.Is(err, maxapi.ErrInvalidParams) {
				t.Fatalf("got %v, want a ParamsError for %s", err, tt.field)
			}
			if d := maxapi.Classify(err); d.Action != maxapi.ActionRejected || d.Reason != tt.reason || d.Unrecognised {
				t.Errorf("Classify = %v, want rejected (%s)", d, tt.reason)
			}
		})
	}
	if _, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: strings.Repeat("ы", maxapi.MaxTextLength)}); err != nil {
		t.Errorf("a text of exactly %d characters: %v", maxapi.MaxTextLength, err)
	}
	if n := b.emu.Stats().Requests; n != 1 {
		t.Errorf("the emulator saw %d requests, want only the valid one", n)
	}
}

// TestAnswers sends to recipients in every state and checks the typed
// error, the sentinels it matches and its classification.
func TestAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{States: map[emulator.Recipient]emulator.RecipientState{
		emulator.User(1): emulator.StateBlocked,
		emulator.Chat(2): emulator.StateDenied,
		emulator.User(3): emulator.StateNotFound,
		emulator.Chat(3): emulator.StateNotFound,
		emulator.User(4): emulator.StateForbidden,
	}})
	for _, tt := range []struct {
		name         string
		p            maxapi.SendMessageParams
		status       int
		is           []error
		isNot        []error
		action       maxapi.Action
		reason       string
		unrecognised bool
	}{
		{"blocked", maxapi.SendMessageParams{UserID: 1, Text: "x"}, 403,
			[]error{maxapi.ErrBlocked, maxapi.ErrChatDenied, maxapi.ErrForbidden}, []error{maxapi.ErrForbiddenUnknown, maxapi.ErrNotFound},
			maxapi.ActionRecipientDead, maxapi.ReasonBlocked, false},
		{"chat denied", maxapi.SendMessageParams{ChatID: 2, Text: "x"}, 403,
			[]error{maxapi.ErrChatDenied, maxapi.ErrForbidden}, []error{maxapi.ErrBlocked},
			maxapi.ActionRecipientDead, maxapi.ReasonChatDenied, false},
		{"user not found", maxapi.SendMessageParams{UserID: 3, Text: "x"}, 404,
			[]error{maxapi.ErrRecipientNotFound, maxapi.ErrNotFound}, []error{maxapi.ErrNotFoundUnknown, maxapi.ErrForbidden},
			maxapi.ActionRecipientDead, maxapi.ReasonNotFound, false},
		{"chat not found", maxapi.SendMessageParams{ChatID: 3, Text: "x"}, 404,
			[]error{maxapi.ErrRecipientNotFound}, nil,
			maxapi.ActionRecipientDead, maxapi.ReasonNotFound, false},
		{"unrecognised 403", maxapi.SendMessageParams{UserID: 4, Text: "x"}, 403,
			[]error{maxapi.ErrForbiddenUnknown, maxapi.ErrForbidden}, []error{maxapi.ErrChatDenied},
			maxapi.ActionRecipientDead, maxapi.ReasonForbidden, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.SendMessage(t.Context(), tt.p)
			e, ok := errors.AsType[*maxapi.Error](err)
			if !ok || e.Status != tt.status || e.Code == "" || e.Op != maxapi.OpSendMessage {
				t.Fatalf("got %v, want a *maxapi.Error with status %d and a code", err, tt.status)
			}
			for _, s := range tt.is {
				if !errors.Is(err, s) {
					t.Errorf("%v does not match %v", err, s)
				}
			}
			for _, s := range tt.isNot {
				if errors.Is(err, s) {
					t.Errorf("%v matches %v", err, s)
				}
			}
			d := maxapi.Classify(err)
			if d.Action != tt.action || d.Reason != tt.reason || d.Unrecognised != tt.unrecognised || d.Status != tt.status ||
				d.Code != e.Code || !strings.Contains(d.Description, e.Code) {
				t.Errorf("Classify = %+v, want %v (%s), unrecognised %v, with the status and MAX's code", d, tt.action, tt.reason, tt.unrecognised)
			}
		})
	}
}

func TestUnauthorizedNeverShowsTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	other, err := maxapi.New(testToken+"x", maxapi.WithBaseURL(b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer other.CloseIdleConnections()
	for name, call := range map[string]func() error{
		"send": func() error {
			_, err := other.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
			return err
		},
		"get me": func() error { _, err := other.GetMe(t.Context()); return err },
	} {
		err := call()
		if !errors.Is(err, maxapi.ErrUnauthorized) {
			t.Fatalf("%s: got %v, want ErrUnauthorized", name, err)
		}
		e, _ := errors.AsType[*maxapi.Error](err)
		if e.Code != "verify.token" {
			t.Errorf("%s: code %q, want verify.token", name, e.Code)
		}
		d := maxapi.Classify(err)
		if d.Action != maxapi.ActionHalt || d.Reason != maxapi.ReasonUnauthorized {
			t.Errorf("%s: Classify = %v, want halt (unauthorized)", name, d)
		}
		noToken(t, name+" error", fmt.Sprintf("%v %+v %#v", err, err, err))
		noToken(t, name+" decision", fmt.Sprintf("%+v", d))
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		noToken(t, "the client printed with "+f, fmt.Sprintf(f, other))
		noToken(t, "the client value printed with "+f, fmt.Sprintf(f, *other))
	}
}

func TestRateLimited(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		omit    bool
		want    time.Duration
		wantSet bool
	}{
		{"with Retry-After", false, 3 * time.Second, true},
		{"without Retry-After", true, maxapi.DefaultRetryAfter, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, emulator.Config{OmitRetryAfter: tt.omit})
			if err := b.emu.OpenPause(emulator.PauseRequest{RetryAfter: 3}); err != nil {
				t.Fatal(err)
			}
			_, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
			if !errors.Is(err, maxapi.ErrRateLimited) {
				t.Fatalf("got %v, want ErrRateLimited", err)
			}
			d := maxapi.Classify(err)
			if d.Action != maxapi.ActionRetryAfter || d.RetryAfter != tt.want || d.RetryAfterGiven != tt.wantSet || d.Code != "too.many.requests" {
				t.Errorf("Classify = %+v, want retry after %v (given %v)", d, tt.want, tt.wantSet)
			}
		})
	}
}

func TestServerErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		outage    emulator.Outage
		typed     string
		maybe     bool
		wantCode  string
		wantMatch error
	}{
		{emulator.Outage{Mode: emulator.Fault5xx}, "response", true, "", maxapi.ErrBadResponse},
		{emulator.Outage{Mode: emulator.Fault5xx, Status: 500}, "response", false, "", maxapi.ErrBadResponse},
		{emulator.Outage{Mode: emulator.FaultJSON5xx}, "api", false, "internal.error", maxapi.ErrServer},
		{emulator.Outage{Mode: emulator.FaultJSON5xx, Status: 503}, "api", false, "service.unavailable", maxapi.ErrServer},
		{emulator.Outage{Mode: emulator.FaultJSON5xx, Status: 504}, "api", true, "internal.error", maxapi.ErrMaybeDelivered},
	} {
		t.Run(fmt.Sprintf("%s %d", tt.outage.Mode, tt.outage.Status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, emulator.Config{Outage: &tt.outage})
			_, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
			if !errors.Is(err, maxapi.ErrServer) || !errors.Is(err, tt.wantMatch) || errors.Is(err, maxapi.ErrMaybeDelivered) != tt.maybe {
				t.Fatalf("got %v, want a server error (may have been delivered: %v)", err, tt.maybe)
			}
			if _, isAPI := errors.AsType[*maxapi.Error](err); isAPI != (tt.typed == "api") {
				t.Errorf("got %T, want a %s error", err, tt.typed)
			}
			d := maxapi.Classify(err)
			if d.Action != maxapi.ActionBackoff || d.Reason != maxapi.ReasonServer || d.MaybeDelivered != tt.maybe || d.Code != tt.wantCode {
				t.Errorf("Classify = %+v, want backoff (server), code %q, maybe delivered %v", d, tt.wantCode, tt.maybe)
			}
		})
	}
}

func TestNetworkErrors(t *testing.T) {
	t.Parallel()
	t.Run("dropped after the request was written", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}})
		_, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
		if !errors.Is(err, maxapi.ErrNetwork) || !errors.Is(err, maxapi.ErrMaybeDelivered) {
			t.Fatalf("got %v, want a network error after which the message may have been delivered", err)
		}
		if d := maxapi.Classify(err); d.Action != maxapi.ActionBackoff || d.Reason != maxapi.ReasonNetwork || !d.MaybeDelivered {
			t.Errorf("Classify = %v, want backoff (network), may have been delivered", d)
		}
		if ms := b.emu.Messages(); len(ms) != 1 || !ms[0].ResponseDropped {
			t.Errorf("the emulator recorded %+v, want the message delivered", ms)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, err := maxapi.New(testToken, maxapi.WithBaseURL(url))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
		if !errors.Is(err, maxapi.ErrNetwork) || errors.Is(err, maxapi.ErrMaybeDelivered) {
			t.Fatalf("got %v, want a network error before anything was written", err)
		}
		if d := maxapi.Classify(err); d.Action != maxapi.ActionBackoff || d.MaybeDelivered {
			t.Errorf("Classify = %v, want backoff, not delivered", d)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}}, maxapi.WithTimeout(100*time.Millisecond))
		_, err := b.client.SendMessage(t.Context(), maxapi.SendMessageParams{UserID: 1, Text: "x"})
		if !errors.Is(err, maxapi.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, maxapi.ErrMaybeDelivered) {
			t.Fatalf("got %v, want a timeout after the request was written", err)
		}
		if d := maxapi.Classify(err); d.Action != maxapi.ActionBackoff || d.Reason != maxapi.ReasonTimeout || !d.MaybeDelivered {
			t.Errorf("Classify = %v, want backoff (timeout), may have been delivered", d)
		}
	})
	t.Run("caller canceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := b.client.SendMessage(ctx, maxapi.SendMessageParams{UserID: 1, Text: "x"})
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for b.emu.Stats().Faulted == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the request never reached the emulator")
			}
			<-time.After(time.Millisecond)
		}
		cancel()
		err := <-done
		if d := maxapi.Classify(err); d.Action != maxapi.ActionCanceled || !d.MaybeDelivered {
			t.Errorf("Classify(%v) = %v, want canceled, may have been delivered", err, d)
		}
	})
}

// TestAdmissionRefusedNeverReachesMAX checks that a request whose admission
// check refuses is not written, with the client's own transport (checked on
// the connection's first write) and with a caller's (checked before).
func TestAdmissionRefusedNeverReachesMAX(t *testing.T) {
	t.Parallel()
	refusal := errors.New("paused")
	for name, opts := range map[string][]maxapi.Option{
		"own transport":   nil,
		"caller's client": {maxapi.WithHTTPClient(&http.Client{})},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, emulator.Config{}, opts...)
			// A first request opens a kept-alive connection, so the refused
			// one would reuse it.
			if _, err := b.client.GetMe(t.Context()); err != nil {
				t.Fatal(err)
			}
			calls := 0
			ctx := maxapi.WithAdmission(t.Context(), func() error { calls++; return refusal })
			_, err := b.client.SendMessage(ctx, maxapi.SendMessageParams{UserID: 1, Text: "x"})
			ns, ok := errors.AsType[*maxapi.NotSentError](err)
			if !ok || !errors.Is(err, refusal) || ns.Op != maxapi.OpSendMessage {
				t.Fatalf("got %v, want a NotSentError wrapping the refusal", err)
			}
			if d := maxapi.Classify(err); d.Action != maxapi.ActionNotSent {
				t.Errorf("Classify = %v, want not sent", d)
			}
			if calls == 0 {
				t.Error("the admission check was never asked")
			}
			if st := b.emu.Stats(); st.Requests != 1 || st.ByEndpoint[emulator.EndpointSend] != 0 || len(b.emu.Messages()) != 0 {
				t.Errorf("the emulator saw %+v, want only the GET /me", st)
			}
			admitted := maxapi.WithAdmission(t.Context(), func() error { return nil })
			if _, err := b.client.SendMessage(admitted, maxapi.SendMessageParams{UserID: 1, Text: "x"}); err != nil {
				t.Errorf("an admitted request: %v", err)
			}
		})
	}
}

// TestCAFile serves the emulator over HTTPS with a certificate the system
// does not trust, as platform-api2.max.ru's is for many systems: the client
// fails without the CA and succeeds with WithCAFile.
func TestCAFile(t *testing.T) {
	t.Parallel()
	emu, err := emulator.New(emulator.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(emu)
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	plain, err := maxapi.New(testToken, maxapi.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.GetMe(t.Context())
	if !errors.Is(err, maxapi.ErrNetwork) || errors.Is(err, maxapi.ErrMaybeDelivered) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error before anything was sent", err)
	}

	trusting, err := maxapi.New(testToken, maxapi.WithBaseURL(srv.URL), maxapi.WithCAFile(caFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(trusting.CloseIdleConnections)
	if _, err := trusting.GetMe(t.Context()); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	// Admission still runs on the first write of a TLS connection.
	ctx := maxapi.WithAdmission(t.Context(), func() error { return errors.New("halted") })
	if _, err := trusting.SendMessage(ctx, maxapi.SendMessageParams{UserID: 1, Text: "x"}); !errors.As(err, new(*maxapi.NotSentError)) {
		t.Errorf("refused over TLS: %v, want NotSentError", err)
	}
	if st := emu.Stats(); st.ByEndpoint[emulator.EndpointSend] != 0 {
		t.Errorf("the emulator saw %d sends, want none", st.ByEndpoint[emulator.EndpointSend])
	}
}

func TestBasePathPrefix(t *testing.T) {
	t.Parallel()
	emu, err := emulator.New(emulator.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/max/", http.StripPrefix("/max", emu))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := maxapi.New(testToken, maxapi.WithBaseURL(srv.URL+"/max/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetMe(t.Context()); err != nil {
		t.Errorf("GetMe through a path prefix: %v", err)
	}
}

// WithUserAgent names the sender in every request, which the emulator
// records for a request sent inside a pause and for the 429 that announced
// it; a bad User-Agent is refused.
func TestUserAgent(t *testing.T) {
	t.Parallel()
	if _, err := maxapi.New(testToken, maxapi.WithUserAgent("")); err == nil {
		t.Error("New with an empty User-Agent succeeded")
	}
	if _, err := maxapi.New(testToken, maxapi.WithUserAgent("worker\nX-Injected: 1")); err == nil {
		t.Error("New with a User-Agent holding a newline succeeded")
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC).UnixNano())
	ua := useragent.Of("max-worker", 42)
	b := setup(t, emulator.Config{Now: func() time.Time { return time.Unix(0, now.Load()).UTC() }}, maxapi.WithUserAgent(ua))
	if err := b.emu.OpenPause(emulator.PauseRequest{RetryAfter: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := b.client.GetMe(t.Context()); err == nil {
			t.Fatalf("GetMe %d inside the pause succeeded", i)
		}
		now.Add(int64(emulator.SenderReactionTime))
	}
	q := b.emu.Stats().SentInPauseRequests
	if len(q) != 1 || q[0].UserAgent != ua || len(q[0].Openers) != 1 || q[0].Openers[0].UserAgent != ua {
		t.Errorf("requests sent inside the pause: %+v, want one by %q after a 429 to %q", q, ua, ua)
	}
}
