package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Connect opens a NATS connection with opts and returns at once, even when no
// server is reachable yet: the client keeps trying in the background
// (RetryOnFailedConnect) and reconnects forever after a disconnect
// (MaxReconnects -1), waiting between rounds with exponential backoff and
// jitter capped at opts.MaxReconnectWait. Callers see the state with
// nc.IsConnected(); publishes fail fast while it is down.
//
// The reconnect buffer is disabled: a publish made while disconnected fails
// at once instead of being held and sent after the reconnect. Held messages
// would reach the server on the new connection after messages that were
// published before them on the old one and lost, which reorders a chat.
//
// Connection events (connected, disconnected, reconnected, closed,
// asynchronous errors) are logged on logger, after one line saying where the
// URL and the credentials came from (opts.Origins) and which kind of
// credentials is used. A permissions violation the server reports (a
// publish or subscription the user's permissions do not allow) is logged as
// an error naming the operation and the subject. URLs are logged redacted
// and no credential ever appears in a log line or a returned error.
func Connect(ctx context.Context, opts Options, logger *slog.Logger) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	opts = opts.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	urls := opts.ServerURLs()
	shown := RedactURL(urls)
	secrets := append([]string{opts.Password, opts.Token}, urlSecrets(urls)...)
	logger = logger.With("component", "nats")
	logger.Info("NATS connection settings", "url", shown, "url_from", originOr(opts.Origins.URL),
		"auth", opts.Auth(), "auth_from", originOr(opts.Origins.Auth), "tls", opts.TLSCA != "" || opts.TLSCert != "" || strings.Contains(urls, "tls://"))

	closed := make(chan struct{}) // closed with the connection: ends the unserved watch
	natsOpts := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.PingInterval(opts.PingInterval),
		nats.MaxPingsOutstanding(opts.MaxPingsOut),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(reconnectDelay(opts.ReconnectWait, opts.MaxReconnectWait)),
		nats.ConnectHandler(func(nc *nats.Conn) {
			if opts.Reconnects != nil {
				// A first connect made after failed tries counts them
				// as reconnects.
				opts.Reconnects.Record(nc.Stats().Reconnects)
			}
			logger.Info("connected to NATS", "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("disconnected from NATS", "err", scrub(err, secrets...))
				return
			}
			logger.Info("disconnected from NATS")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if opts.Reconnects != nil {
				opts.Reconnects.Record(nc.Stats().Reconnects)
			}
			logger.Info("reconnected to NATS", "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Debug("NATS reconnect attempt failed", "err", scrub(err, secrets...))
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			logger.Info("NATS connection closed")
			close(closed)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if v, ok := parseViolation(err); ok {
				logger.Error("the NATS server refused an operation: the user's permissions do not allow it (see docs/RUNBOOK.md#permissions)",
					"operation", v.op, "subject", v.subject, "err", scrub(err, secrets...))
				return
			}
			attrs := []any{"err", scrub(err, secrets...)}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			logger.Warn("NATS asynchronous error", attrs...)
		}),
	}
	switch {
	case opts.CredsFile != "":
		natsOpts = append(natsOpts, nats.UserCredentials(opts.CredsFile))
	case opts.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(opts.NKeyFile)
		if err != nil {
			// nats.go's error names the file and never the seed.
			return nil, fmt.Errorf("connecting to NATS: -%s: %w", FlagNKey, err)
		}
		natsOpts = append(natsOpts, o)
	case opts.User != "":
		natsOpts = append(natsOpts, nats.UserInfo(opts.User, opts.Password))
	case opts.Token != "":
		natsOpts = append(natsOpts, nats.Token(opts.Token))
	}
	if opts.TLSCA != "" {
		natsOpts = append(natsOpts, nats.RootCAs(opts.TLSCA))
	}
	if opts.TLSCert != "" {
		natsOpts = append(natsOpts, nats.ClientCert(opts.TLSCert, opts.TLSKey))
	}
	if opts.TLSFirst {
		natsOpts = append(natsOpts, nats.TLSHandshakeFirst())
	}
	if opts.InboxPrefix != "" {
		natsOpts = append(natsOpts, nats.CustomInboxPrefix(opts.InboxPrefix))
	}

	nc, err := nats.Connect(urls, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", shown, scrub(err, secrets...))
	}
	if !nc.IsConnected() {
		logger.Warn("NATS is not reachable yet; retrying in the background", "url", shown)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connecting to NATS at %s: %w", shown, err)
	}
	go newUnservedWatch(nc, js, logger, opts.LeaveUnservedAfter).run(closed)
	return nc, nil
}

// originOr returns where a setting came from, or "options" when the caller
// did not say.
func originOr(s string) string {
	if s == "" {
		return "options"
	}
	return s
}

// reconnectDelay returns nats.go's delay callback: exponential from base,
// capped at max, with "equal jitter" (half fixed, half random) so that many
// clients restarted together do not reconnect in lockstep.
func reconnectDelay(base, max time.Duration) nats.ReconnectDelayHandler {
	return func(attempts int) time.Duration {
		d := base
		for i := 1; i < attempts && d < max; i++ {
			d *= 2
		}
		d = min(d, max)
		half := d / 2
		return half + rand.N(half+1)
	}
}

// urlSecrets returns the passwords and tokens embedded in the URL list, for
// scrubbing; an unparsable entry is returned whole.
func urlSecrets(urls string) []string {
	var out []string
	for _, p := range splitURLs(urls) {
		u, err := url.Parse(p)
		switch {
		case err != nil:
			out = append(out, p)
		case u.User == nil:
		default:
			if pw, ok := u.User.Password(); ok {
				out = append(out, pw)
			} else {
				out = append(out, u.User.Username())
			}
		}
	}
	return out
}
