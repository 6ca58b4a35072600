package twilio

import (
	"context"
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
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/internal/httpgate"
)

// MaxBodyLength is the longest Body Twilio accepts, in characters (error
// 21617).
const MaxBodyLength = 1600

// apiVersion is the path prefix of the REST API the client speaks.
const apiVersion = "/2010-04-01"

// Operations, as errors and logs name them.
const (
	opSend         = "send"
	opFetchAccount = "fetch account"
)

// Client sends SMS through Twilio's Messages API. It is safe for
// concurrent use.
type Client struct {
	// creds is behind a pointer so that even printing a Client value (not
	// a pointer) with %v shows an address, not a credential.
	creds            *credentials
	baseURL          string
	from             string
	messagingService string
	http             *http.Client
	// gated is true when http is the client's own, whose connections run
	// admission checks on their first write (internal/httpgate).
	gated   bool
	timeout time.Duration
	logger  *slog.Logger
	// userAgent is the User-Agent header, or "" for Go's default.
	userAgent string
}

// New returns a client for the account with the given Account SID (AC
// followed by 32 hex digits) and auth token, sending from the number or
// Messaging Service set by [WithFrom] or [WithMessagingService] (one of
// them is required). The credentials are never printed, logged or returned
// in an error.
func New(accountSID, authToken string, opts ...Option) (*Client, error) {
	if !accountSIDPattern.MatchString(accountSID) {
		return nil, errors.New("twilio: the Account SID must be AC followed by 32 hex digits")
	}
	if err := validateToken(authToken); err != nil {
		return nil, err
	}
	o := options{baseURL: DefaultBaseURL, timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("twilio: %w", err)
		}
	}
	switch {
	case o.from == "" && o.messagingService == "":
		return nil, errors.New("twilio: a sender is required: WithFrom or WithMessagingService")
	case o.from != "" && o.messagingService != "":
		return nil, errors.New("twilio: WithFrom and WithMessagingService exclude each other")
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
	return &Client{
		creds:            &credentials{accountSID: secret(accountSID), authToken: secret(authToken)},
		baseURL:          base,
		from:             o.from,
		messagingService: o.messagingService,
		http:             o.httpClient,
		gated:            gated,
		timeout:          o.timeout,
		logger:           o.logger.With("component", "twilio"),
		userAgent:        o.userAgent,
	}, nil
}

// validateToken checks an auth token's shape without revealing it.
func validateToken(token string) error {
	if token == "" {
		return errors.New("twilio: empty auth token")
	}
	if len(token) > 256 {
		return errors.New("twilio: auth token longer than 256 characters")
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("twilio: auth token has an invalid character at position %d (printable ASCII without spaces)", i)
		}
	}
	return nil
}

// normalizeBaseURL checks the base URL and strips a trailing slash.
func normalizeBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("twilio: invalid base URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("twilio: invalid base URL %q: scheme must be http or https", raw)
	case u.Host == "":
		return "", fmt.Errorf("twilio: invalid base URL %q: no host", raw)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", fmt.Errorf("twilio: invalid base URL %q: must not have user info, query or fragment", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// newHTTPClient returns an HTTP/1.1 client whose connections run admission
// checks on their first write, with a pool for a worker sending in parallel
// to one host, and which does not follow redirects (Twilio's API does not
// redirect; following one would replay a POST as a GET).
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport:     httpgate.NewTransport(httpgate.Options{}),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// String describes the client without its credentials.
func (c *Client) String() string {
	return fmt.Sprintf("twilio.Client{baseURL: %s, sender: %s, account: %s}", c.baseURL, c.sender(), redacted)
}

// GoString describes the client without its credentials.
func (c *Client) GoString() string { return c.String() }

// LogValue describes the client without its credentials.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.baseURL), slog.String("sender", c.sender()), slog.String("account", redacted))
}

// sender names the sender for String: the Messaging Service, or the From
// number masked like any phone number.
func (c *Client) sender() string {
	if c.messagingService != "" {
		return "messaging service " + c.messagingService
	}
	return maskPhones(c.from)
}

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Send creates a Message resource: one SMS with body to the number to, in
// E.164. Twilio answers 201 with the resource as soon as the message is
// queued (or accepted by a Messaging Service); delivery to the handset
// happens later and is not reported here. A To or Body that Twilio would
// refuse (empty, or a Body over 1600 characters) is refused with a
// [*RequestError] and nothing is sent.
func (c *Client) Send(ctx context.Context, to, body string) (*Message, error) {
	switch {
	case to == "":
		return nil, &RequestError{Op: opSend, Param: "To", Problem: "is empty"}
	case strings.TrimSpace(body) == "":
		return nil, &RequestError{Op: opSend, Param: "Body", Problem: "is empty"}
	case utf8.RuneCountInString(body) > MaxBodyLength:
		return nil, &RequestError{Op: opSend, Param: "Body", Problem: fmt.Sprintf("is longer than %d characters", MaxBodyLength)}
	}
	form := url.Values{"To": {to}, "Body": {body}}
	if c.messagingService != "" {
		form.Set("MessagingServiceSid", c.messagingService)
	} else {
		form.Set("From", c.from)
	}
	var res messageResource
	if err := c.call(ctx, opSend, http.MethodPost, "/Messages.json", form, &res); err != nil {
		return nil, err
	}
	if res.SID == "" {
		// Twilio answered 2xx: the message may well exist.
		return nil, &ResponseError{Op: opSend, StatusCode: http.StatusCreated, Problem: "resource without a sid", MayHaveBeenDelivered: true}
	}
	m := &Message{
		SID:         res.SID,
		Status:      res.Status,
		NumSegments: int(res.NumSegments),
		ErrorCode:   int(res.ErrorCode),
		DateCreated: twilioTime(res.DateCreated),
	}
	if res.ErrorMessage != nil {
		m.ErrorMessage = c.creds.redact(sanitize(*res.ErrorMessage, 512))
	}
	return m, nil
}

// FetchAccount fetches the Account resource of the client's Account SID.
// Calling it checks the credentials: wrong ones fail with an error matching
// [ErrUnauthorized]. The returned Account says whether the account is
// active.
func (c *Client) FetchAccount(ctx context.Context) (*Account, error) {
	var a Account
	if err := c.call(ctx, opFetchAccount, http.MethodGet, ".json", nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// call performs one request and logs its outcome.
func (c *Client) call(ctx context.Context, op, method, path string, form url.Values, result any) error {
	start := time.Now()
	status, err := c.do(ctx, op, method, path, form, result)
	attrs := []slog.Attr{
		slog.String("op", op),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
	}
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok && e.Code != 0 {
			attrs = append(attrs, slog.Int("code", e.Code))
		}
		attrs = append(attrs, slog.String("error", err.Error()))
		c.logger.LogAttrs(ctx, slog.LevelDebug, "twilio request failed", attrs...)
		return err
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "twilio request", attrs...)
	return nil
}

// do performs one request and returns the HTTP status (0 without an
// answer).
func (c *Client) do(ctx context.Context, op, method, path string, form url.Values, result any) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, &NetworkError{Op: op, Canceled: true, Err: err}
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeoutFrom(ctx, c.timeout))
	defer cancel()

	// wrote records whether the request reached the connection: after that,
	// a failure may hide a created message.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	endpoint := c.baseURL + apiVersion + "/Accounts/" + string(c.creds.accountSID) + path
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(reqCtx, trace), method, endpoint, body)
	if err != nil {
		return 0, c.networkError(ctx, reqCtx, op, err, false)
	}
	req.SetBasicAuth(string(c.creds.accountSID), string(c.creds.authToken))
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
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
	return resp.StatusCode, parseAnswer(op, resp.StatusCode, resp.Header, data, result, c.creds.redact)
}

// networkError builds the NetworkError of a failed request. The *url.Error
// that net/http returns is unwrapped, since its message is the URL with the
// Account SID; anything else that mentions a credential is scrubbed.
func (c *Client) networkError(parent, reqCtx context.Context, op string, err error, written bool) error {
	for {
		urlErr, ok := err.(*url.Error)
		if !ok {
			break
		}
		err = urlErr.Err
	}
	ne := &NetworkError{Op: op, MayHaveBeenDelivered: written, Err: c.creds.scrub(err)}
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
