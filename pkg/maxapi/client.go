package maxapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// maxTokenLength bounds a token: MAX's are under a hundred characters.
const maxTokenLength = 512

// Client calls the MAX Bot API. It is safe for concurrent use.
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

// New returns a client for the bot with the given token: the raw token
// MAX's platform issued, without "Bearer". It must be 1..512 characters of
// visible ASCII; it is never printed, logged or returned in an error.
func New(token string, opts ...Option) (*Client, error) {
	if err := validateToken(token); err != nil {
		return nil, err
	}
	o := options{baseURL: DefaultBaseURL, timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("maxapi: %w", err)
		}
	}
	base, err := normalizeBaseURL(o.baseURL)
	if err != nil {
		return nil, err
	}
	gated := false
	if o.httpClient != nil && o.caFile != "" {
		return nil, errors.New("maxapi: WithCAFile and WithHTTPClient exclude each other: add the CA to your client's TLS configuration")
	}
	if o.httpClient == nil {
		if o.httpClient, err = newHTTPClient(o.caFile); err != nil {
			return nil, err
		}
		gated = true
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
		logger:    o.logger.With("component", "maxapi"),
		userAgent: o.userAgent,
	}, nil
}

// validateToken checks a token's shape without revealing it.
func validateToken(token string) error {
	switch {
	case token == "":
		return errors.New("maxapi: empty bot token")
	case len(token) > maxTokenLength:
		return fmt.Errorf("maxapi: bot token is %d characters long, the limit is %d", len(token), maxTokenLength)
	case strings.HasPrefix(strings.ToLower(token), "bearer "):
		return errors.New(`maxapi: bot token starts with "Bearer ": MAX wants the raw token`)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("maxapi: bot token has an invalid character at position %d (visible ASCII only)", i)
		}
	}
	return nil
}

// normalizeBaseURL checks the base URL and strips a trailing slash.
func normalizeBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("maxapi: invalid base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("maxapi: invalid base URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("maxapi: invalid base URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("maxapi: invalid base URL %q: must not have user info, query or fragment", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// newHTTPClient returns an HTTP client whose transport runs the admission
// check of a request on the connection's first write (internal/httpgate:
// HTTP/1.1, one request per connection), keeps enough idle connections to
// the host for a worker sending in parallel, trusts the certificates of
// caFile besides the system's, and does not follow redirects (MAX does not
// redirect; following one would replay a POST as a GET and hide the real
// answer).
func newHTTPClient(caFile string) (*http.Client, error) {
	t := httpgate.NewTransport(httpgate.Options{})
	if caFile != "" {
		roots, err := rootsWith(caFile)
		if err != nil {
			return nil, err
		}
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// rootsWith returns the system's roots plus the certificates of a PEM file.
func rootsWith(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("maxapi: reading the CA file: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("maxapi: the CA file %s holds no PEM certificate", caFile)
	}
	return roots, nil
}

// String describes the client without its token.
func (c *Client) String() string {
	return fmt.Sprintf("maxapi.Client{baseURL: %s, token: %s}", c.baseURL, redacted)
}

// GoString describes the client without its token.
func (c *Client) GoString() string { return c.String() }

// LogValue describes the client without its token.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.baseURL), slog.String("token", redacted))
}

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// SendMessage sends a text message, with an image and an inline keyboard
// of link buttons when given, with POST /messages and returns the sent
// Message, whose MessageID is the proof of delivery. Parameters MAX would
// refuse (no or two recipients, an empty text or one over 4000 characters,
// an unknown format, a keyboard over MAX's limits) fail with a
// [*ParamsError] without a request.
func (c *Client) SendMessage(ctx context.Context, p SendMessageParams) (*Message, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	q := url.Values{}
	if p.UserID != 0 {
		q.Set("user_id", strconv.FormatInt(p.UserID, 10))
	} else {
		q.Set("chat_id", strconv.FormatInt(p.ChatID, 10))
	}
	if p.DisableLinkPreview {
		q.Set("disable_link_preview", "true")
	}
	body := newMessageBody{Text: p.Text, Format: p.Format, Attachments: p.attachments()}
	if p.Silent {
		body.Notify = new(bool)
	}
	var res sendMessageResult
	if err := c.call(ctx, OpSendMessage, http.MethodPost, "/messages?"+q.Encode(), body, &res); err != nil {
		return nil, err
	}
	if res.Message == nil || res.Message.Body.MID == "" {
		// MAX accepted the request but the answer does not say what it
		// became: it may well have been delivered.
		return nil, &ResponseError{Op: OpSendMessage, StatusCode: http.StatusOK, Problem: "success without a message id", MayHaveBeenDelivered: true}
	}
	m := res.Message
	return &Message{
		MessageID: m.Body.MID,
		Seq:       m.Body.Seq,
		ChatID:    m.Recipient.ChatID,
		ChatType:  m.Recipient.ChatType,
		UserID:    m.Recipient.UserID,
		Time:      time.UnixMilli(m.Timestamp),
		Text:      m.Body.Text,
	}, nil
}

// validate checks the parameters as MAX would.
func (p SendMessageParams) validate() error {
	bad := func(field, problem string) error {
		return &ParamsError{Op: OpSendMessage, Field: field, Problem: problem}
	}
	switch {
	case p.UserID != 0 && p.ChatID != 0:
		return bad("user_id", "and chat_id are both set: give one")
	case p.UserID == 0 && p.ChatID == 0:
		return bad("user_id", "or chat_id is required")
	case p.UserID < 0:
		return bad("user_id", fmt.Sprintf("%d is not a user id", p.UserID))
	case p.Format != FormatPlain && p.Format != FormatHTML && p.Format != FormatMarkdown:
		return bad("format", fmt.Sprintf("%q is not html, markdown or empty", p.Format))
	case !utf8.ValidString(p.Text):
		return bad("text", "is not valid UTF-8")
	case strings.TrimSpace(p.Text) == "":
		return bad("text", "is empty")
	}
	if n := utf8.RuneCountInString(p.Text); n > MaxTextLength {
		return bad("text", fmt.Sprintf("is %d characters long, MAX's limit is %d", n, MaxTextLength))
	}
	if p.ImageURL != "" && utf8.RuneCountInString(p.ImageURL) > MaxButtonURLLength {
		return bad("image_url", fmt.Sprintf("is longer than %d characters", MaxButtonURLLength))
	}
	if len(p.Buttons) > MaxButtonRows {
		return bad("buttons", fmt.Sprintf("%d rows, MAX's limit is %d", len(p.Buttons), MaxButtonRows))
	}
	for i, row := range p.Buttons {
		field := fmt.Sprintf("buttons[%d]", i)
		switch {
		case len(row) == 0:
			return bad(field, "is an empty row")
		case len(row) > MaxLinkButtonsPerRow:
			return bad(field, fmt.Sprintf("has %d link buttons, MAX's limit is %d", len(row), MaxLinkButtonsPerRow))
		}
		for j, b := range row {
			field := fmt.Sprintf("buttons[%d][%d]", i, j)
			if n := utf8.RuneCountInString(b.Text); strings.TrimSpace(b.Text) == "" || n > MaxButtonTextLength {
				return bad(field+".text", fmt.Sprintf("must be 1..%d characters", MaxButtonTextLength))
			}
			if n := utf8.RuneCountInString(b.URL); b.URL == "" || n > MaxButtonURLLength {
				return bad(field+".url", fmt.Sprintf("must be 1..%d characters", MaxButtonURLLength))
			}
		}
	}
	return nil
}

// GetMe returns the bot (GET /me). Calling it at start-up validates the
// token and the base URL: a wrong or revoked token fails with an error
// matching ErrUnauthorized.
func (c *Client) GetMe(ctx context.Context) (*Bot, error) {
	var b Bot
	if err := c.call(ctx, OpGetMe, http.MethodGet, "/me", nil, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// call performs one request and logs its outcome.
func (c *Client) call(ctx context.Context, op, method, path string, body, result any) error {
	start := time.Now()
	status, err := c.do(ctx, op, method, path, body, result)
	attrs := []slog.Attr{
		slog.String("op", op),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		c.logger.LogAttrs(ctx, slog.LevelDebug, "max api request failed", attrs...)
		return err
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "max api request", attrs...)
	return nil
}

// do performs one request and returns the HTTP status (0 without an
// answer).
func (c *Client) do(ctx context.Context, op, method, path string, body, result any) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, &NetworkError{Op: op, Canceled: true, Err: err}
	}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("maxapi: %s: encoding the body: %w", op, err)
		}
		rd = bytes.NewReader(data)
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeoutFrom(ctx, c.timeout))
	defer cancel()

	// wrote records whether the request reached the connection: after
	// that, a failure may hide a delivered message.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(reqCtx, trace), method, c.baseURL+path, rd)
	if err != nil {
		return 0, c.networkError(ctx, reqCtx, op, err, false)
	}
	req.Header.Set("Authorization", string(*c.token))
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpgate.Do(c.http, c.gated, req)
	if err != nil {
		if ns, ok := errors.AsType[*httpgate.NotSentError](err); ok {
			return 0, &NotSentError{Op: op, Err: ns.Err}
		}
		return 0, c.networkError(ctx, reqCtx, op, err, wrote.Load())
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		// An answer had started: the request was certainly received.
		return resp.StatusCode, c.networkError(ctx, reqCtx, op, err, true)
	}
	return resp.StatusCode, parseResponse(op, resp.StatusCode, resp.Header, data, result, c.token.redact, time.Now())
}

// networkError builds the NetworkError for a failed request. The *url.Error
// that net/http returns is unwrapped (its message repeats the URL), and
// anything that mentions the token is scrubbed.
func (c *Client) networkError(parent, reqCtx context.Context, op string, err error, written bool) error {
	for {
		urlErr, ok := err.(*url.Error)
		if !ok {
			break
		}
		err = urlErr.Err
	}
	ne := &NetworkError{Op: op, MayHaveBeenDelivered: written, Err: c.token.scrub(err)}
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
