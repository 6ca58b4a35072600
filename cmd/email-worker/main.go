// Command email-worker pulls notifications for email from the NOTIFY stream
// and sends them through an SMTP server (go-mail), with a Message-ID derived
// from the idempotency key and HTML and plain-text parts, once per recipient
// in order, within the configured rate. The delivery engine is
// pkg/delivery, the email channel pkg/channel/email, the daemon's shared
// wiring internal/workerd; this file declares the email flags.
//
// The SMTP password comes from $SMTP_PASSWORD or -smtp-password-file, never
// from a flag value.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/workerd"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Getenv, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "email-worker:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

const usage = `Usage: email-worker -smtp HOST:PORT -from ADDRESS [flags]

Sends notifications from the NOTIFY stream (notify.email.<recipient>) as email
through an SMTP server, and moves those it cannot deliver (hard bounce,
invalid address) to the next channel of their route. Every flag can also be
set as EMAIL_WORKER_<FLAG> or in the -config YAML file; an explicit flag wins
over the environment, which wins over the file. $NATS_URL sets -nats too. The
SMTP user is -smtp-user; its password $SMTP_PASSWORD or -smtp-password-file.

`

type flags struct {
	email        email.Config
	tls          string
	passwordFile string
}

func spec(f *flags) workerd.Spec {
	return workerd.Spec{
		Channel:   email.Name,
		EnvPrefix: "EMAIL_WORKER",
		HTTP:      "127.0.0.1:9105",
		Usage:     usage,
		Version:   version,
		Register: func(cs *config.Set, engine *delivery.Config) {
			e := &f.email
			config.String(cs, &e.Addr, "smtp", "", "the SMTP server, `host:port` (587 with starttls, 465 with tls)").Check(func(v string) error {
				if v == "" {
					return errors.New("required")
				}
				return nil
			})
			config.String(cs, &f.tls, "smtp-tls", string(email.DefaultTLS), "how the connection is encrypted: starttls, tls or none (none only for a relay on this host)").
				Check(config.OneOf(string(email.TLSStartTLS), string(email.TLSImplicit), string(email.TLSNone)))
			config.String(cs, &e.Username, "smtp-user", "", "SMTP AUTH user name (its password: $SMTP_PASSWORD or -smtp-password-file)")
			config.String(cs, &f.passwordFile, "smtp-password-file", "", "`file` holding the SMTP password (default: $SMTP_PASSWORD)")
			config.String(cs, &e.From, "from", "", "the sender, e.g. \"Shop <noreply@shop.example>\" (also where bounces go)").Check(func(v string) error {
				if v == "" {
					return errors.New("required")
				}
				return nil
			})
			config.String(cs, &e.MessageIDDomain, "message-id-domain", "", "the right-hand side of every Message-ID (default: the -from domain)")
			config.String(cs, &e.HELO, "helo", "", "the name given in EHLO (default: this host's name)")
			config.Float(cs, &e.Rate, "rate", email.DefaultRate, "messages per second through the server").Check(config.Positive)
			config.Float(cs, &e.RecipientPerMinute, "recipient-per-minute", email.DefaultRecipientPerMinute, "messages per minute to one address").Check(config.Positive)
			// An SMTP transaction is slower than an API call: the engine's
			// request timeout (raised while the server is slow) starts from
			// the channel's.
			cs.Check(func() error {
				if engine.RequestTimeout < email.DefaultTimeout {
					e.Timeout = email.DefaultTimeout
				} else {
					e.Timeout = engine.RequestTimeout
				}
				return nil
			})
		},
		Build: func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error) {
			f.email.TLS = email.TLSMode(f.tls)
			if f.email.Username != "" {
				pw, err := workerd.ReadSecret(f.passwordFile, "smtp-password-file", "SMTP_PASSWORD", getenv)
				if err != nil {
					return nil, daemon.UsageError{Err: fmt.Errorf("SMTP password: %w", err)}
				}
				f.email.Password = pw
			}
			return email.New(f.email, email.Deps{Logger: log, Now: time.Now})
		},
		Fatal: func(err error) bool {
			var e *email.Error
			return errors.As(err, &e) && email.Classify(e).Kind == delivery.Halt
		},
	}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return workerd.Main(ctx, spec(&flags{}), args, getenv, stderr)
}
