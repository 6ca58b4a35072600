package botapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// Client calls the Telegram Bot API. It is safe for concurrent use.
type Client struct {
	// token is behind a pointer so that even printing a Client value (not
	// a pointer) with %v shows an address, not the token.
	token   *secret
	baseURL string
	http    *http.Client
	// gated is true when http is the client's own, whose connections run
	// admission checks on their first write (internal/httpgate).
	gated   bool
	timeout time.Duration
	logger  *slog.Logger
	// userAgent is the User-Agent header, or "" for Go's default.
	userAgent string
}

// New returns a client for the bot with the given token. The token must be
// non-empty and consist of letters, digits, ':', '_' and '-' only; it is
// never printed, logged or returned in an error.
func New(token string, opts ...Option) (*Client, error) {
	if err := validateToken(token); err != nil {
		return nil, err
	}
	o := options{baseURL: DefaultBaseURL, timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("botapi: %w", err)
		}
	}
	base, err := normalizeBaseURL(o.baseURL)
	if err != nil {
		return nil, err
	}
	gated := false
	if o.httpClient == nil {
		o.httpClient, gated = newHTTPClient(), true
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	tok := secret(token)
	return &Client{
		token:     &tok,
		baseURL:   base,
		http:      o.httpClient,
		gated:     gated,
		timeout:   o.timeout,
		logger:    o.logger.With("component", "botapi"),
		userAgent: o.userAgent,
	}, nil
}

// validateToken checks a token's shape without revealing it.
func validateToken(token string) error {
	if token == "" {
		return errors.New("botapi: empty bot token")
	}
	for i, r := range token {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("botapi: bot token has an invalid character at position %d (allowed: A-Z a-z 0-9 : _ -)", i)
		}
	}
	return nil
}

// normalizeBaseURL checks the base URL and strips a trailing slash.
func normalizeBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("botapi: invalid base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("botapi: invalid base URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("botapi: invalid base URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("botapi: invalid base URL %q: must not have user info, query or fragment", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// newHTTPClient returns an HTTP client whose transport keeps enough idle
// connections to the Bot API host for a worker sending in parallel, and which
// does not follow redirects (the Bot API never redirects; following one would
// replay a POST as a GET and hide the real answer).
//
// It speaks HTTP/1.1 only: a connection then carries one request at a time,
// which lets it run the request's admission check on its first write
// (admission.go). The Bot API serves HTTP/1.1 as well as HTTP/2, and the pool
// keeps the connection of every request a worker had in flight at once, up
// to httpgate.DefaultMaxIdleConnsPerHost.
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport:     httpgate.NewTransport(httpgate.Options{}),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// String describes the client without its token.
func (c *Client) String() string {
	return fmt.Sprintf("botapi.Client{baseURL: %s, token: %s}", c.baseURL, redacted)
}

// GoString describes the client without its token.
func (c *Client) GoString() string { return c.String() }

// LogValue describes the client without its token.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.baseURL), slog.String("token", redacted))
}

// CloseIdleConnections closes the idle connections of the client's transport.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// SendMessage sends a text message and returns the sent Message, whose
// MessageID is the proof of delivery.
func (c *Client) SendMessage(ctx context.Context, p SendMessageParams) (*Message, error) {
	var m Message
	if err := c.call(ctx, "sendMessage", p, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// SendPhoto sends a photo, by URL or file id, with a caption and returns
// the sent Message.
func (c *Client) SendPhoto(ctx context.Context, p SendPhotoParams) (*Message, error) {
	var m Message
	if err := c.call(ctx, "sendPhoto", p, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// GetMe returns the bot's own user. Calling it at start-up validates the
// token: a wrong or revoked token fails with an error matching
// ErrUnauthorized.
func (c *Client) GetMe(ctx context.Context) (*User, error) {
	var u User
	if err := c.call(ctx, "getMe", struct{}{}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// call performs one Bot API request and logs its outcome.
func (c *Client) call(ctx context.Context, method string, params, result any) error {
	start := time.Now()
	status, err := c.do(ctx, method, params, result)
	if !c.logger.Enabled(ctx, slog.LevelDebug) {
		return err // the attributes below cost three allocations a request
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		c.logger.LogAttrs(ctx, slog.LevelDebug, "bot api request failed", attrs...)
		return err
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "bot api request", attrs...)
	return nil
}

// do performs one request and returns the HTTP status (0 without an answer).
func (c *Client) do(ctx context.Context, method string, params, result any) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, &NetworkError{Method: method, Canceled: true, Err: err}
	}
	body, err := json.Marshal(params)
	if err != nil {
		return 0, fmt.Errorf("botapi: %s: encoding parameters: %w", method, err)
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeoutFrom(ctx, c.timeout))
	defer cancel()

	// wrote records whether the request reached the connection: after that,
	// a failure may hide a delivered message.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	endpoint := c.baseURL + "/bot" + string(*c.token) + "/" + method
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(reqCtx, trace), http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, c.networkError(ctx, reqCtx, method, err, false)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := httpgate.Do(c.http, c.gated, req)
	if err != nil {
		if ns, ok := err.(*httpgate.NotSentError); ok {
			return 0, &NotSentError{Method: method, Err: ns.Err}
		}
		return 0, c.networkError(ctx, reqCtx, method, err, wrote.Load())
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		// An answer had started: the request was certainly received.
		return resp.StatusCode, c.networkError(ctx, reqCtx, method, err, true)
	}
	return resp.StatusCode, parseResponse(method, resp.StatusCode, resp.Header, data, result, c.token.redact)
}

// networkError builds the NetworkError for a failed request. The *url.Error
// that net/http returns is unwrapped, since its message is the full URL with
// the token; anything else that mentions the token is scrubbed.
func (c *Client) networkError(parent, reqCtx context.Context, method string, err error, written bool) error {
	for {
		urlErr, ok := err.(*url.Error)
		if !ok {
			break
		}
		err = urlErr.Err
	}
	ne := &NetworkError{Method: method, MayHaveBeenDelivered: written, Err: c.token.scrub(err)}
	var netErr net.Error
	switch {
	case parent.Err() != nil:
		ne.Canceled = true
	case reqCtx.Err() != nil:
		ne.Timeout = true
	case errors.As(err, &netErr) && netErr.Timeout():
		ne.Timeout = true
	}
	return ne
}
