package maxapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/tgnotify/tgnotify/internal/useragent"
)

// DefaultBaseURL is MAX's Bot API endpoint since 2026 (platform-api.max.ru
// is deprecated).
const DefaultBaseURL = "https://platform-api2.max.ru"

// DefaultTimeout bounds one request, from dialing to reading the answer.
const DefaultTimeout = 10 * time.Second

// Option configures a Client.
type Option func(*options) error

type options struct {
	baseURL    string
	httpClient *http.Client
	caFile     string
	timeout    time.Duration
	logger     *slog.Logger
	userAgent  string
}

// WithBaseURL points the client at another server, such as the emulator:
// the part before "/messages", such as "http://127.0.0.1:8082". A path
// prefix is kept.
func WithBaseURL(baseURL string) Option {
	return func(o *options) error {
		o.baseURL = baseURL
		return nil
	}
}

// WithHTTPClient makes the client use h instead of its own, whose transport
// runs admission checks on the connection's first write and is tuned for
// many concurrent requests to one host. With h, an admission check runs
// just before the request is handed over instead. The client's per-request
// timeout still applies. It cannot be combined with WithCAFile: configure
// h's TLS instead.
func WithHTTPClient(h *http.Client) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("WithHTTPClient: nil *http.Client")
		}
		o.httpClient = h
		return nil
	}
}

// WithCAFile adds the certificates of a PEM file to the roots the client
// trusts, besides the system's: platform-api2.max.ru presents a certificate
// of the Russian Ministry of Digital Development's root CA ("Russian
// Trusted Root CA"), which many systems do not ship. New fails when the
// file cannot be read or holds no certificate.
func WithCAFile(path string) Option {
	return func(o *options) error {
		if path == "" {
			return errors.New("WithCAFile: empty path")
		}
		o.caFile = path
		return nil
	}
}

// WithTimeout sets the per-request timeout (default 10s). It must be
// positive.
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
// own). The max-worker names itself and its process id there
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

// WithLogger makes the client log each request at debug level (operation,
// status, duration, error; never the token). The default discards.
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
// while MAX answers slowly. A call it ends fails as a timeout, not as
// canceled. d <= 0 keeps the client's timeout.
func WithRequestTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey{}, d)
}

func timeoutFrom(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Value(timeoutKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return def
}
