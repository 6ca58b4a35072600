package twilio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/tgnotify/tgnotify/internal/useragent"
)

// DefaultBaseURL is Twilio's REST API endpoint.
const DefaultBaseURL = "https://api.twilio.com"

// DefaultTimeout bounds one request, from dialing to reading the answer.
const DefaultTimeout = 10 * time.Second

// Option configures a Client.
type Option func(*options) error

type options struct {
	baseURL          string
	httpClient       *http.Client
	timeout          time.Duration
	logger           *slog.Logger
	userAgent        string
	from             string
	messagingService string
}

// Shapes of Twilio identifiers and senders.
var (
	accountSIDPattern       = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	messagingServicePattern = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
	e164Pattern             = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)
	shortCodePattern        = regexp.MustCompile(`^[0-9]{3,8}$`)
	alphanumericPattern     = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	letterPattern           = regexp.MustCompile(`[A-Za-z]`)
)

// WithBaseURL points the client at another server, such as the emulator:
// the URL is the part before "/2010-04-01/...", such as
// "http://127.0.0.1:8082".
func WithBaseURL(baseURL string) Option {
	return func(o *options) error {
		o.baseURL = baseURL
		return nil
	}
}

// WithHTTPClient makes the client use h instead of its own, whose
// transport runs admission checks on a connection's first write. With h,
// the check runs just before a request is handed over. The client's
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
// own). The sms-worker names itself and its process id there
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
// status, Twilio code, duration, error; never the URL, the credentials or a
// phone number). The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("WithLogger: nil *slog.Logger")
		}
		o.logger = l
		return nil
	}
}

// WithFrom sends from a Twilio phone number in E.164 (+15017122661), a
// short code (12345) or an alphanumeric sender ID (letters, digits and
// spaces, at most 11, with at least one letter): Twilio's From parameter.
// Give it or [WithMessagingService], not both.
func WithFrom(from string) Option {
	return func(o *options) error {
		ok := e164Pattern.MatchString(from) || shortCodePattern.MatchString(from) ||
			(alphanumericPattern.MatchString(from) && letterPattern.MatchString(from))
		if !ok {
			return fmt.Errorf("WithFrom: %q is not an E.164 number, a short code or an alphanumeric sender ID", from)
		}
		o.from = from
		return nil
	}
}

// WithMessagingService sends through a Messaging Service (MG followed by
// 32 hex digits): Twilio's MessagingServiceSid parameter, with which Twilio
// picks the sender from the service's pool. Give it or [WithFrom], not
// both.
func WithMessagingService(sid string) Option {
	return func(o *options) error {
		if !messagingServicePattern.MatchString(sid) {
			return errors.New("WithMessagingService: a Messaging Service SID is MG followed by 32 hex digits")
		}
		o.messagingService = sid
		return nil
	}
}

// timeoutKey carries a per-call timeout in a context.
type timeoutKey struct{}

// WithRequestTimeout returns a context whose calls time out after d instead
// of the client's own timeout (WithTimeout). A delivery engine raises it
// while Twilio answers slowly. A call it ends fails as a timeout, not as
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
