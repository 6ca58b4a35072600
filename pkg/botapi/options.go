package botapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/tgnotify/tgnotify/internal/useragent"
)

// DefaultBaseURL is Telegram's Bot API endpoint.
const DefaultBaseURL = "https://api.telegram.org"

// DefaultTimeout bounds one request, from dialing to reading the answer.
const DefaultTimeout = 10 * time.Second

// Option configures a Client.
type Option func(*options) error

type options struct {
	baseURL    string
	httpClient *http.Client
	timeout    time.Duration
	logger     *slog.Logger
	userAgent  string
}

// WithBaseURL points the client at another Bot API server: a local
// telegram-bot-api server or the emulator. The URL is the part before
// "/bot<token>/<method>", such as "http://127.0.0.1:8081".
func WithBaseURL(baseURL string) Option {
	return func(o *options) error {
		o.baseURL = baseURL
		return nil
	}
}

// WithHTTPClient makes the client use h instead of its own, which has a
// transport tuned for many concurrent requests to one host. The client's
// per-request timeout still applies.
func WithHTTPClient(h *http.Client) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("WithHTTPClient: nil *http.Client")
		}
		o.httpClient = h
		return nil
	}
}

// WithTimeout sets the per-request timeout (default 10s). It must be positive.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return errors.New("WithTimeout: timeout must be positive")
		}
		o.timeout = d
		return nil
	}
}

// WithUserAgent sets the User-Agent header of every request (by default Go's
// own). The telegram worker names itself and its process id there
// (internal/useragent), so that a provider's log, or a test harness that
// kills processes, can tell which process sent a request. It must be
// non-empty printable ASCII.
func WithUserAgent(ua string) Option {
	return func(o *options) error {
		if err := useragent.Check(ua); err != nil {
			return fmt.Errorf("WithUserAgent: %w", err)
		}
		o.userAgent = ua
		return nil
	}
}

// WithLogger makes the client log each request at debug level (method,
// status, duration, error; never the URL or token). The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("WithLogger: nil *slog.Logger")
		}
		o.logger = l
		return nil
	}
}

// timeoutKey carries a per-call timeout in a context.
type timeoutKey struct{}

// WithRequestTimeout returns a context whose calls time out after d instead
// of the client's own timeout (WithTimeout). A delivery engine raises it
// while Telegram answers slowly. A call it ends fails with a
// [*NetworkError] whose Timeout is set, not Canceled: it is Telegram's
// slowness, not the caller giving up. d <= 0 keeps the client's timeout.
func WithRequestTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey{}, d)
}

func timeoutFrom(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Value(timeoutKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return def
}
