package intake

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/botapi"
)

// Registrar registers a webhook with Telegram ([botapi.Client]).
type Registrar interface {
	SetWebhook(ctx context.Context, p botapi.SetWebhookParams) error
}

// WebhookDeps are a webhook's collaborators.
type WebhookDeps struct {
	// Bot registers the webhook at start when WebhookConfig.URL is set.
	Bot Registrar
	// Recipients applies each update's news (the delivery worker).
	Recipients Recipients
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Registry receives the intake's metrics; default a private registry.
	Registry prometheus.Registerer
}

// maxUpdateBytes bounds an update's body; Telegram's are a few kilobytes.
const maxUpdateBytes = 1 << 20

// applyTimeout bounds how long a post waits for its change to be written;
// Telegram posts it again after a failure.
const applyTimeout = 10 * time.Second

// Webhook is the endpoint Telegram posts the bot's updates to. Create it
// with [NewWebhook]; it is an http.Handler for the configured path, and
// Serve runs it on a listener.
type Webhook struct {
	cfg    WebhookConfig
	secret [sha256.Size]byte
	bot    Registrar
	apply  applier
	log    *slog.Logger
	m      *metrics
	mux    *http.ServeMux
}

// NewWebhook checks the configuration and builds the endpoint.
func NewWebhook(cfg WebhookConfig, d WebhookDeps) (*Webhook, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("intake: %w", err)
	}
	cfg = cfg.withDefaults()
	switch {
	case d.Recipients == nil:
		return nil, errors.New("intake: Recipients (the delivery worker) are required")
	case cfg.URL != "" && d.Bot == nil:
		return nil, errors.New("intake: a Bot API client is required to register the webhook URL")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering intake metrics: %w", err)
	}
	log := d.Logger.With("component", "intake", "mode", string(ModeWebhook))
	h := &Webhook{cfg: cfg, secret: sha256.Sum256([]byte(cfg.Secret)), bot: d.Bot, log: log, m: m,
		apply: applier{recipients: d.Recipients, log: log, m: m}}
	h.mux = http.NewServeMux()
	h.mux.Handle(cfg.Path, http.HandlerFunc(h.serve))
	return h, nil
}

// ServeHTTP serves the endpoint at the configured path; any other path is
// 404.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// serve answers one post: 405 for another method, 401 without the secret
// (compared in constant time, its length included), 400 for a body that is
// not an update, 500 when the change could not be written (Telegram posts
// it again), 200 once applied or ignored.
func (h *Webhook) serve(w http.ResponseWriter, r *http.Request) {
	answer := func(code int, body string) {
		h.m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(http.StatusMethodNotAllowed, `{"ok":false,"description":"method not allowed"}`)
		return
	}
	got := sha256.Sum256([]byte(r.Header.Get(botapi.SecretTokenHeader)))
	if subtle.ConstantTimeCompare(got[:], h.secret[:]) != 1 {
		// Never the header's value: it may be a near miss of the secret.
		h.log.Warn("webhook request without the secret token refused", "remote", r.RemoteAddr,
			"has_header", r.Header.Get(botapi.SecretTokenHeader) != "")
		answer(http.StatusUnauthorized, `{"ok":false,"description":"unauthorized"}`)
		return
	}
	var u botapi.Update
	dec := json.NewDecoder(io.LimitReader(r.Body, maxUpdateBytes))
	if err := dec.Decode(&u); err != nil || u.UpdateID == 0 {
		answer(http.StatusBadRequest, `{"ok":false,"description":"not a Telegram update"}`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), applyTimeout)
	defer cancel()
	if err := h.apply.apply(ctx, u); err != nil {
		h.log.Warn("cannot apply an update; Telegram posts it again", "update_id", u.UpdateID, "err", err)
		answer(http.StatusInternalServerError, `{"ok":false,"description":"try again"}`)
		return
	}
	answer(http.StatusOK, `{"ok":true}`)
}

// Serve serves the endpoint on ln until ctx ends, then shuts down
// gracefully. When a URL is configured it first registers it with
// Telegram, in the background, trying again until Telegram accepts.
func (h *Webhook) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn)}
	var wg sync.WaitGroup
	regCtx, stopReg := context.WithCancel(ctx)
	defer func() { stopReg(); wg.Wait() }()
	if h.cfg.URL != "" {
		wg.Go(func() { h.register(regCtx) })
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	h.log.Info("webhook endpoint listening", "addr", ln.Addr().String(), "path", h.cfg.Path, "register", h.cfg.URL != "")
	select {
	case err := <-errc:
		return fmt.Errorf("webhook endpoint: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-errc
	return nil
}

// register sets the webhook: the URL, the secret, the update kinds and one
// connection, so that Telegram posts one update at a time, in order.
func (h *Webhook) register(ctx context.Context) {
	p := botapi.SetWebhookParams{URL: h.cfg.URL, SecretToken: h.cfg.Secret, MaxConnections: 1, AllowedUpdates: allowedUpdates}
	wait := retryMin
	for {
		err := h.bot.SetWebhook(ctx, p)
		if err == nil {
			h.log.Info("webhook registered with Telegram", "url", h.cfg.URL)
			return
		}
		if ctx.Err() != nil {
			return
		}
		h.m.errors.WithLabelValues("register").Inc()
		h.log.Warn("cannot register the webhook; trying again", "url", h.cfg.URL, "err", err, "in", wait)
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(wait*2, retryMax)
	}
}
