package intake_test

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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/intake"
)

const secret = "s3cr3t-Token_1"

// serveWebhook runs a webhook endpoint registered with the emulator.
func (b *bundle) serveWebhook(t *testing.T) (*running, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + intake.DefaultWebhookPath
	r := &running{reg: prometheus.NewRegistry(), logs: &logBuffer{}, done: make(chan error, 1)}
	wh, err := intake.NewWebhook(intake.WebhookConfig{Secret: secret, URL: url},
		intake.WebhookDeps{Bot: b.client(t), Recipients: b.w, Logger: logger(t, r.logs), Registry: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- wh.Serve(ctx, ln) }()
	t.Cleanup(func() { r.stop(t) })
	return r, url
}

func post(t *testing.T, url, method, secretHeader, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secretHeader != "" {
		req.Header.Set(botapi.SecretTokenHeader, secretHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestWebhook: the worker registers its endpoint with the secret token;
// Telegram posts my_chat_member updates there, which mark the chat dead
// and revive it; the next order is delivered. A post without the secret,
// or with a wrong one, is refused with 401 and neither secret is logged;
// getUpdates meanwhile answers 409.
func TestWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, url := b.serveWebhook(t)
	natstest.WaitFor(t, 10*time.Second, func() bool {
		w := b.env.Emu.Updates().Webhook
		return w != nil && w.HasSecret
	}, "the webhook registered with its secret")

	if _, err := b.env.Emu.BlockByUser(600); err != nil {
		t.Fatal(err)
	}
	if d := b.waitDead(t, 600, true); d.Reason != "blocked" || d.Via != delivery.ViaUpdate {
		t.Fatalf("dead mark = %+v", d)
	}
	if _, err := b.env.Emu.UnblockByUser(600); err != nil {
		t.Fatal(err)
	}
	b.waitDead(t, 600, false)
	b.order(600, "1")
	b.delivered(t, 600, 1)
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(b.eventsFor("recipient_revived", 600)) == 1 }, "a recipient_revived event")

	update := `{"update_id":99,"my_chat_member":{"chat":{"id":601,"type":"private"},"from":{"id":601},"date":1700000000,` +
		`"old_chat_member":{"status":"member","user":{"id":1}},"new_chat_member":{"status":"kicked","user":{"id":1}}}}`
	for _, c := range []struct {
		name, method, secret, body string
		want                       int
	}{
		{"no secret", http.MethodPost, "", update, http.StatusUnauthorized},
		{"a wrong secret", http.MethodPost, "wrong-" + secret, update, http.StatusUnauthorized},
		{"a prefix of the secret", http.MethodPost, secret[:5], update, http.StatusUnauthorized},
		{"not a POST", http.MethodGet, secret, "", http.StatusMethodNotAllowed},
		{"not an update", http.MethodPost, secret, "{nope", http.StatusBadRequest},
	} {
		if got := post(t, url, c.method, c.secret, c.body); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if _, dead := b.deadMark(t, 601); dead {
		t.Fatal("a refused post marked chat 601 dead")
	}
	if got := post(t, strings.TrimSuffix(url, intake.DefaultWebhookPath)+"/other", http.MethodPost, secret, update); got != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", got)
	}
	if got := r.metric(t, "tgnotify_intake_webhook_requests_total", "code", "401"); got != 3 {
		t.Errorf("401s counted = %v, want 3", got)
	}
	if log := r.logs.String(); strings.Contains(log, secret[:5]) || !strings.Contains(log, "without the secret token refused") {
		t.Errorf("the log shows a secret, or not the refusals:\n%s", log)
	}
	_, err := b.client(t).GetUpdates(t.Context(), botapi.GetUpdatesParams{})
	if !errors.Is(err, botapi.ErrWebhookActive) {
		t.Errorf("getUpdates with the webhook set: %v, want 409 webhook active", err)
	}
}

// failingRecipients fails the first fails changes.
type failingRecipients struct {
	fails int
	calls int
}

func (f *failingRecipients) ChangeRecipient(context.Context, delivery.RecipientChange) (bool, error) {
	f.calls++
	if f.calls <= f.fails {
		return false, errors.New("NATS unreachable")
	}
	return true, nil
}

// TestWebhookAsksForTheUpdateAgain: an update whose change cannot be
// written is answered 500, so that Telegram posts it again.
func TestWebhookAsksForTheUpdateAgain(t *testing.T) {
	t.Parallel()
	rec := &failingRecipients{fails: 1}
	wh, err := intake.NewWebhook(intake.WebhookConfig{Secret: secret}, intake.WebhookDeps{Recipients: rec, Logger: logger(t, &logBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"update_id":5,"message":{"message_id":1,"chat":{"id":7,"type":"private"},"date":1700000000,"text":"/start"}}`
	for _, want := range []int{http.StatusInternalServerError, http.StatusOK} {
		req := httptest.NewRequest(http.MethodPost, intake.DefaultWebhookPath, strings.NewReader(body))
		req.Header.Set(botapi.SecretTokenHeader, secret)
		w := httptest.NewRecorder()
		wh.ServeHTTP(w, req)
		if w.Code != want {
			t.Fatalf("post %d: %d, want %d", rec.calls, w.Code, want)
		}
	}
}

func TestWebhookConfig(t *testing.T) {
	for _, bad := range []string{"", "has space", strings.Repeat("x", 257), "ünïcode"} {
		if _, err := intake.NewWebhook(intake.WebhookConfig{Secret: bad}, intake.WebhookDeps{Recipients: &failingRecipients{}}); !errors.Is(err, intake.ErrBadSecret) {
			t.Errorf("secret %q: %v, want ErrBadSecret", bad, err)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	if s := (intake.WebhookConfig{Secret: secret}).String(); strings.Contains(s, secret) {
		t.Errorf("String shows the secret: %s", s)
	}
	if _, err := intake.NewWebhook(intake.WebhookConfig{Secret: secret, URL: "https://x"}, intake.WebhookDeps{Recipients: &failingRecipients{}}); err == nil {
		t.Error("a URL to register without a Bot API client was accepted")
	}
}
