package botapi_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

const testToken = "123456789:TEST-client-token"

// bundle is a client talking to an emulator over real HTTP.
type bundle struct {
	emu    *emulator.Emulator
	srv    *httptest.Server
	client *botapi.Client
}

// setup starts an emulator with cfg (Token filled in) and a client for it.
func setup(t *testing.T, cfg emulator.Config, opts ...botapi.Option) *bundle {
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
	client, err := botapi.New(testToken, append([]botapi.Option{botapi.WithBaseURL(srv.URL)}, opts...)...)
	if err != nil {
		t.Fatalf("botapi.New: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return &bundle{emu: emu, srv: srv, client: client}
}

// waitFor polls cond every millisecond until it holds, failing the test
// after a deadline of 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		token string
		opts  []botapi.Option
	}{
		{"empty token", "", nil},
		{"token with a slash", "123:abc/def", nil},
		{"token with a space", "123:abc def", nil},
		{"token with a query", "123:abc?x=1", nil},
		{"base URL without scheme", testToken, []botapi.Option{botapi.WithBaseURL("api.telegram.org")}},
		{"base URL with a query", testToken, []botapi.Option{botapi.WithBaseURL("https://api.telegram.org/?x=1")}},
		{"zero timeout", testToken, []botapi.Option{botapi.WithTimeout(0)}},
		{"nil HTTP client", testToken, []botapi.Option{botapi.WithHTTPClient(nil)}},
		{"nil logger", testToken, []botapi.Option{botapi.WithLogger(nil)}},
		{"empty User-Agent", testToken, []botapi.Option{botapi.WithUserAgent("")}},
		{"User-Agent with a newline", testToken, []botapi.Option{botapi.WithUserAgent("worker\nX-Injected: 1")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := botapi.New(tt.token, tt.opts...)
			if err == nil {
				t.Fatalf("New = %v, want an error", c)
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
	if _, err := botapi.New(testToken, botapi.WithBaseURL("http://127.0.0.1:8081/prefix/")); err != nil {
		t.Errorf("New with a path prefix: %v", err)
	}
}

// WithUserAgent names the sender in every request; without it the request
// carries Go's default.
func TestUserAgent(t *testing.T) {
	t.Parallel()
	agents := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"result":{"id":1,"is_bot":true,"first_name":"B","username":"b_bot"}}`)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		opts []botapi.Option
		want string
	}{
		{[]botapi.Option{botapi.WithUserAgent("tgnotify-telegram-worker (pid 42)")}, "tgnotify-telegram-worker (pid 42)"},
		{nil, "Go-http-client/1.1"},
	} {
		c, err := botapi.New(testToken, append(tt.opts, botapi.WithBaseURL(srv.URL))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetMe(t.Context()); err != nil {
			t.Fatalf("GetMe: %v", err)
		}
		if got := <-agents; got != tt.want {
			t.Errorf("User-Agent %q, want %q", got, tt.want)
		}
	}
}

func TestSendMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	ctx := t.Context()
	const forum = -1001234567890 // a supergroup: only it has topics
	p := botapi.SendMessageParams{
		ChatID:              forum,
		Text:                "<b>Order #17</b> shipped &amp; on its way",
		ParseMode:           botapi.ParseModeHTML,
		DisableNotification: true,
		ProtectContent:      true,
		AllowPaidBroadcast:  true,
		MessageThreadID:     5,
		LinkPreviewOptions:  &botapi.LinkPreviewOptions{IsDisabled: true},
		ReplyMarkup: &botapi.InlineKeyboardMarkup{InlineKeyboard: [][]botapi.InlineKeyboardButton{
			{{Text: "Track", URL: "https://example.com/track/17"}},
		}},
	}
	m, err := b.client.SendMessage(ctx, p)
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if m.MessageID != 1 || m.Chat.ID != forum || m.Chat.Type != "supergroup" || m.Date == 0 || m.MessageThreadID != 5 {
		t.Errorf("got message %+v, want id 1 in topic 5 of supergroup %d with a date", m, int64(forum))
	}
	if got, want := m.Text, "Order #17 shipped & on its way"; got != want {
		t.Errorf("Text = %q, want %q (entities parsed)", got, want)
	}
	if m.From == nil || !m.From.IsBot {
		t.Errorf("From = %+v, want the bot", m.From)
	}
	msgs := b.emu.Messages()
	if len(msgs) != 1 {
		t.Fatalf("emulator recorded %d messages, want 1", len(msgs))
	}
	r := msgs[0]
	if r.MessageID != m.MessageID || r.Text != p.Text || r.ParseMode != "HTML" || !r.DisableNotification ||
		!r.ProtectContent || !r.AllowPaidBroadcast || r.MessageThreadID != 5 || !r.HasReplyMarkup || r.Method != "sendMessage" ||
		len(r.Buttons) != 1 || len(r.Buttons[0]) != 1 || r.Buttons[0][0] != (emulator.Button{Text: "Track", URL: "https://example.com/track/17"}) ||
		r.LinkPreview == nil || *r.LinkPreview != (emulator.LinkPreview{IsDisabled: true}) {
		t.Errorf("recorded %+v, want every parameter of %+v", r, p)
	}

	m2, err := b.client.SendMessage(ctx, botapi.SendMessageParams{ChatID: forum, Text: "second"})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if m2.MessageID != 2 {
		t.Errorf("second MessageID = %d, want 2", m2.MessageID)
	}
}

func TestSendPhoto(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	ctx := t.Context()
	p := botapi.SendPhotoParams{
		ChatID:                42,
		Photo:                 "https://shop.example/p/17.jpg",
		Caption:               "<b>Order #17</b> delivered",
		ParseMode:             botapi.ParseModeHTML,
		ShowCaptionAboveMedia: true,
		ReplyMarkup: &botapi.InlineKeyboardMarkup{InlineKeyboard: [][]botapi.InlineKeyboardButton{
			{{Text: "Rate us", URL: "https://shop.example/rate/17"}},
		}},
	}
	m, err := b.client.SendPhoto(ctx, p)
	if err != nil {
		t.Fatalf("SendPhoto: %v", err)
	}
	if m.MessageID != 1 || m.Caption != "Order #17 delivered" || m.Text != "" || len(m.Photo) == 0 || m.Photo[len(m.Photo)-1].FileID == "" {
		t.Fatalf("got message %+v, want a photo with the caption's plain text", m)
	}
	r := b.emu.Messages()[0]
	if r.Method != "sendPhoto" || r.Photo != p.Photo || r.Text != p.Caption || !r.ShowCaptionAboveMedia ||
		len(r.Buttons) != 1 || r.Buttons[0][0].URL != "https://shop.example/rate/17" {
		t.Errorf("recorded %+v, want every parameter of %+v", r, p)
	}
	// The file id Telegram gave the photo can be sent again.
	if _, err := b.client.SendPhoto(ctx, botapi.SendPhotoParams{ChatID: 42, Photo: m.Photo[len(m.Photo)-1].FileID}); err != nil {
		t.Fatalf("SendPhoto by file id: %v", err)
	}

	for _, tc := range []struct {
		name string
		p    botapi.SendPhotoParams
		want error
		desc string
	}{
		{"caption too long", botapi.SendPhotoParams{ChatID: 42, Photo: p.Photo, Caption: strings.Repeat("x", 1025)}, botapi.ErrCaptionTooLong, "message caption is too long"},
		{"not a URL", botapi.SendPhotoParams{ChatID: 42, Photo: "ftp://shop.example/p.jpg"}, botapi.ErrPhoto, "wrong file identifier/HTTP URL specified"},
		{"unknown file id", botapi.SendPhotoParams{ChatID: 42, Photo: "AgACnope"}, botapi.ErrPhoto, "wrong file identifier/HTTP URL specified"},
		{"unreachable", botapi.SendPhotoParams{ChatID: 42, Photo: "https://cdn.shop.invalid/p.jpg"}, botapi.ErrPhoto, "failed to get HTTP URL content"},
		{"no photo", botapi.SendPhotoParams{ChatID: 42}, botapi.ErrPhoto, "there is no photo in the request"},
		{"topic in a private chat", botapi.SendPhotoParams{ChatID: 42, Photo: p.Photo, MessageThreadID: 3}, botapi.ErrThreadNotFound, "message thread not found"},
		{"topic in a basic group", botapi.SendPhotoParams{ChatID: -42, Photo: p.Photo, MessageThreadID: 3}, botapi.ErrThreadNotFound, "message thread not found"},
		{"button URL", botapi.SendPhotoParams{ChatID: 42, Photo: p.Photo, ReplyMarkup: &botapi.InlineKeyboardMarkup{
			InlineKeyboard: [][]botapi.InlineKeyboardButton{{{Text: "x", URL: "javascript:alert(1)"}}}}}, botapi.ErrMarkup, "Unsupported URL protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.SendPhoto(ctx, tc.p)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.desc) {
				t.Fatalf("SendPhoto = %v, want %v saying %q", err, tc.want, tc.desc)
			}
			if d := botapi.Classify(err); d.Action != botapi.ActionDead || d.ChatDead() {
				t.Fatalf("Classify = %v, want a dead message, not a dead chat", d)
			}
		})
	}
	if n := len(b.emu.Messages()); n != 2 {
		t.Fatalf("emulator recorded %d messages, want 2", n)
	}
}

func TestGetMe(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{BotUsername: "shop_bot"})
	u, err := b.client.GetMe(t.Context())
	if err != nil {
		t.Fatalf("GetMe: %v", err)
	}
	if u.ID != 123456789 || !u.IsBot || u.Username != "shop_bot" {
		t.Errorf("GetMe = %+v, want bot 123456789 shop_bot", u)
	}

	wrong, err := botapi.New("123456789:WRONG", botapi.WithBaseURL(b.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.GetMe(t.Context())
	if !errors.Is(err, botapi.ErrUnauthorized) {
		t.Fatalf("GetMe with a wrong token: %v, want ErrUnauthorized", err)
	}
	if d := botapi.Classify(err); d.Action != botapi.ActionHalt {
		t.Errorf("Classify = %v, want halt", d)
	}
}

// TestErrorsFromEmulator checks that every error the emulator models reaches
// the worker as the right decision.
func TestErrorsFromEmulator(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{
		Blocked:     []int64{1001},
		Deactivated: []int64{1002},
		NotFound:    []int64{1003},
		Migrate:     map[int64]int64{-1004: -1001000001004},
	})
	if err := b.emu.SetChatState(-1001000001005, emulator.ChatKicked); err != nil {
		t.Fatal(err)
	}
	if err := b.emu.SetChatState(1006, emulator.ChatForbidden); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		p         botapi.SendMessageParams
		action    botapi.Action
		reason    string
		sentinel  error
		migrateTo int64
	}{
		{"blocked", botapi.SendMessageParams{ChatID: 1001, Text: "x"}, botapi.ActionDead, botapi.ReasonBlocked, botapi.ErrBlockedByUser, 0},
		{"deactivated", botapi.SendMessageParams{ChatID: 1002, Text: "x"}, botapi.ActionDead, botapi.ReasonDeactivated, botapi.ErrUserDeactivated, 0},
		{"not found", botapi.SendMessageParams{ChatID: 1003, Text: "x"}, botapi.ActionDead, botapi.ReasonChatNotFound, botapi.ErrChatNotFound, 0},
		{"migrated", botapi.SendMessageParams{ChatID: -1004, Text: "x"}, botapi.ActionMigrate, botapi.ReasonMigrated, botapi.ErrMigrated, -1001000001004},
		{"kicked", botapi.SendMessageParams{ChatID: -1001000001005, Text: "x"}, botapi.ActionDead, botapi.ReasonKicked, botapi.ErrKicked, 0},
		{"can't send to the user", botapi.SendMessageParams{ChatID: 1006, Text: "x"}, botapi.ActionDead, botapi.ReasonCantSend, botapi.ErrCantSendToUser, 0},
		{"too long", botapi.SendMessageParams{ChatID: 2001, Text: strings.Repeat("я", 4097)}, botapi.ActionDead, botapi.ReasonContent, botapi.ErrMessageTooLong, 0},
		{"empty", botapi.SendMessageParams{ChatID: 2002, Text: "  "}, botapi.ActionDead, botapi.ReasonContent, botapi.ErrMessageEmpty, 0},
		{"bad HTML", botapi.SendMessageParams{ChatID: 2003, Text: "1 < 2", ParseMode: botapi.ParseModeHTML}, botapi.ActionDead, botapi.ReasonContent, botapi.ErrCantParseEntities, 0},
		{"bad MarkdownV2", botapi.SendMessageParams{ChatID: 2004, Text: "Total: 5.00", ParseMode: botapi.ParseModeMarkdownV2}, botapi.ActionDead, botapi.ReasonContent, botapi.ErrCantParseEntities, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.SendMessage(t.Context(), tt.p)
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("SendMessage: %v, want %v", err, tt.sentinel)
			}
			d := botapi.Classify(err)
			if d.Action != tt.action || d.Reason != tt.reason || d.MigrateTo != tt.migrateTo {
				t.Errorf("Classify = %v, want %v (%s) migrate %d", d, tt.action, tt.reason, tt.migrateTo)
			}
		})
	}
}

func TestRateLimitFromEmulator(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	if err := b.emu.OpenPause(emulator.PauseRequest{Scope: emulator.ScopeBot, RetryAfter: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := b.client.SendMessage(t.Context(), botapi.SendMessageParams{ChatID: 1, Text: "x"})
	var apiErr *botapi.Error
	if !errors.As(err, &apiErr) || apiErr.Code != 429 || apiErr.RetryAfter != 5*time.Second {
		t.Fatalf("SendMessage: %v, want 429 retry after 5s", err)
	}
	if d := botapi.Classify(err); d.Action != botapi.ActionRetryAfter || d.RetryAfter != 5*time.Second {
		t.Errorf("Classify = %v, want retry after 5s", d)
	}
}

func TestFaultsFromEmulator(t *testing.T) {
	t.Parallel()
	send := func(t *testing.T, b *bundle) error {
		t.Helper()
		_, err := b.client.SendMessage(t.Context(), botapi.SendMessageParams{ChatID: 7, Text: "x"})
		return err
	}
	t.Run("5xx page", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.Fault5xx}})
		err := send(t, b)
		var respErr *botapi.ResponseError
		if !errors.As(err, &respErr) || respErr.StatusCode != 502 || respErr.Snippet != "502 Bad Gateway" {
			t.Fatalf("got %v, want a ResponseError for the 502 page", err)
		}
		if d := botapi.Classify(err); d.Action != botapi.ActionBackoff || d.Reason != botapi.ReasonServer || !d.MaybeDelivered {
			t.Errorf("Classify = %v, want backoff (server), may have been delivered", d)
		}
	})
	t.Run("JSON 500", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultJSON5xx}})
		err := send(t, b)
		if !errors.Is(err, botapi.ErrServer) || errors.Is(err, botapi.ErrBadResponse) {
			t.Fatalf("got %v, want a JSON server error", err)
		}
	})
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDrop}})
		err := send(t, b)
		var netErr *botapi.NetworkError
		if !errors.As(err, &netErr) || !netErr.MayHaveBeenDelivered || netErr.Timeout || netErr.Canceled {
			t.Fatalf("got %#v, want a network error after writing", err)
		}
		if d := botapi.Classify(err); d.Action != botapi.ActionBackoff || d.Reason != botapi.ReasonNetwork {
			t.Errorf("Classify = %v, want backoff (network)", d)
		}
	})
	t.Run("deliver then drop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultDeliverDrop}})
		err := send(t, b)
		if !errors.Is(err, botapi.ErrMaybeDelivered) {
			t.Fatalf("got %v, want ErrMaybeDelivered", err)
		}
		msgs := b.emu.Messages()
		if len(msgs) != 1 || !msgs[0].ResponseDropped {
			t.Errorf("emulator recorded %+v, want one delivered message with a dropped response", msgs)
		}
		if d := botapi.Classify(err); !d.MaybeDelivered {
			t.Errorf("Classify = %v, want MaybeDelivered", d)
		}
	})
	t.Run("blackhole and timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}}, botapi.WithTimeout(100*time.Millisecond))
		err := send(t, b)
		var netErr *botapi.NetworkError
		if !errors.As(err, &netErr) || !netErr.Timeout || !netErr.MayHaveBeenDelivered {
			t.Fatalf("got %v, want a timeout after writing", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, botapi.ErrTimeout) {
			t.Errorf("errors.Is(%v, context.DeadlineExceeded / ErrTimeout) = false, want true", err)
		}
		if d := botapi.Classify(err); d.Action != botapi.ActionBackoff || d.Reason != botapi.ReasonTimeout {
			t.Errorf("Classify = %v, want backoff (timeout)", d)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultBlackhole}})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := b.client.SendMessage(ctx, botapi.SendMessageParams{ChatID: 7, Text: "x"})
			errc <- err
		}()
		waitFor(t, "the request to reach the emulator", func() bool { return b.emu.Stats().ByFault[emulator.FaultBlackhole] == 1 })
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if d := botapi.Classify(err); d.Action != botapi.ActionCanceled || !d.MaybeDelivered {
			t.Errorf("Classify = %v, want canceled, may have been delivered", d)
		}
	})
	t.Run("already canceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emulator.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.client.SendMessage(ctx, botapi.SendMessageParams{ChatID: 7, Text: "x"})
		if d := botapi.Classify(err); d.Action != botapi.ActionCanceled || d.MaybeDelivered {
			t.Errorf("Classify = %v, want canceled, not delivered", d)
		}
		if n := b.emu.Stats().Requests; n != 0 {
			t.Errorf("emulator saw %d requests, want 0", n)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c, err := botapi.New(testToken, botapi.WithBaseURL("http://"+addr))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SendMessage(t.Context(), botapi.SendMessageParams{ChatID: 7, Text: "x"})
		var netErr *botapi.NetworkError
		if !errors.As(err, &netErr) || netErr.MayHaveBeenDelivered {
			t.Fatalf("got %v, want a network error before writing", err)
		}
		if errors.Is(err, botapi.ErrMaybeDelivered) {
			t.Errorf("connection refused matches ErrMaybeDelivered")
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Errorf("errors.As(%v, *net.OpError) = false, want true", err)
		}
	})
}

// TestConnectionReuse checks that sequential requests share one connection.
func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	cfg := emulator.Config{Token: testToken}
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(emu)
	conns := make(chan struct{}, 100)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := botapi.New(testToken, botapi.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := c.SendMessage(t.Context(), botapi.SendMessageParams{ChatID: int64(i + 1), Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(conns); n != 1 {
		t.Errorf("20 sequential requests opened %d connections, want 1", n)
	}
}

// A request whose admission check refuses it is never written: the emulator
// sees nothing, the call fails with NotSentError, and Classify says not
// sent (no attempt spent). An admitted one goes as usual.
func TestAdmissionRefusedRequestIsNotSent(t *testing.T) {
	b := setup(t, emulator.Config{})
	ctx := context.Background()
	if _, err := b.client.SendMessage(ctx, botapi.SendMessageParams{ChatID: 1, Text: "warm the pool"}); err != nil {
		t.Fatal(err)
	}
	paused := errors.New("paused by a 429")
	for range 5 {
		_, err := b.client.SendMessage(botapi.WithAdmission(ctx, func() error { return paused }), botapi.SendMessageParams{ChatID: 1, Text: "no"})
		var ns *botapi.NotSentError
		if !errors.As(err, &ns) || !errors.Is(err, paused) || ns.Method != "sendMessage" {
			t.Fatalf("refused send = %v, want a NotSentError for sendMessage wrapping the refusal", err)
		}
		if d := botapi.Classify(err); d.Action != botapi.ActionNotSent {
			t.Fatalf("Classify(refused) = %v, want not_sent", d)
		}
	}
	if got := b.emu.Stats().ByMethod["sendMessage"]; got != 1 {
		t.Fatalf("the emulator saw %d sendMessage requests, want 1 (the refused ones never left)", got)
	}
	admitted := 0
	if _, err := b.client.SendMessage(botapi.WithAdmission(ctx, func() error { admitted++; return nil }), botapi.SendMessageParams{ChatID: 1, Text: "yes"}); err != nil {
		t.Fatal(err)
	}
	if admitted == 0 || b.emu.Stats().ByMethod["sendMessage"] != 2 {
		t.Fatalf("admitted send: check ran %d times, emulator saw %d", admitted, b.emu.Stats().ByMethod["sendMessage"])
	}
}
