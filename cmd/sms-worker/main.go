// Command sms-worker pulls notifications for SMS from the NOTIFY stream and
// sends them through Twilio's Messages API, shortened to at most a few
// segments, once per recipient in order, within the sender's rate. The
// delivery engine is pkg/delivery, the SMS channel pkg/channel/sms, the
// daemon's shared wiring internal/workerd; this file declares the SMS flags.
//
// The account SID and auth token come from $TWILIO_ACCOUNT_SID and
// $TWILIO_AUTH_TOKEN, or from -account-sid-file and -auth-token-file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/internal/workerd"
	"github.com/tgnotify/tgnotify/pkg/channel/sms"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/twilio"
)

var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Getenv, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "sms-worker:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

const usage = `Usage: sms-worker [flags]

Sends notifications from the NOTIFY stream (notify.sms.<recipient>) as SMS
through Twilio's Messages API, shortened to -max-segments segments, and moves
those it cannot deliver to the next channel of their route. Every flag can
also be set as SMS_WORKER_<FLAG> or in the -config YAML file; an explicit flag
wins over the environment, which wins over the file. $NATS_URL sets -nats
too. Credentials: $TWILIO_ACCOUNT_SID and $TWILIO_AUTH_TOKEN, or the files.

`

type flags struct {
	sms           sms.Config
	apiURL        string
	from          string
	service       string
	sidFile       string
	authTokenFile string
}

func spec(f *flags) workerd.Spec {
	return workerd.Spec{
		Channel:   sms.Name,
		EnvPrefix: "SMS_WORKER",
		HTTP:      "127.0.0.1:9106",
		Usage:     usage,
		Version:   version,
		Register: func(cs *config.Set, _ *delivery.Config) {
			config.String(cs, &f.apiURL, "sms-api", twilio.DefaultBaseURL, "Twilio API base `URL` (or the emulator)")
			from := config.String(cs, &f.from, "from", "", "the sender: a Twilio phone number in E.164 (or use -messaging-service)")
			service := config.String(cs, &f.service, "messaging-service", "", "a Messaging Service SID to send from its pool (instead of -from)")
			cs.Check(func() error {
				if (f.from == "") == (f.service == "") {
					return &config.Error{Flag: from.Name(), Err: fmt.Errorf("give exactly one of %s and %s", from.Flag(), service.Flag())}
				}
				return nil
			})
			config.String(cs, &f.sidFile, "account-sid-file", "", "`file` holding the account SID (default: $TWILIO_ACCOUNT_SID)")
			config.String(cs, &f.authTokenFile, "auth-token-file", "", "`file` holding the auth token (default: $TWILIO_AUTH_TOKEN)")
			c := &f.sms
			config.Float(cs, &c.SegmentsPerSecond, "segments-per-second", sms.DefaultSegmentsPerSecond, "segments per second the sender releases (1 for a long code)").Check(config.Positive)
			config.Float(cs, &c.RecipientPerMinute, "recipient-per-minute", sms.DefaultRecipientPerMinute, "messages per minute to one phone").Check(config.Positive)
			config.Int(cs, &c.MaxSegments, "max-segments", sms.DefaultMaxSegments, "segments a notification may take after shortening").Check(config.Between(1, 10))
		},
		Build: func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error) {
			sid, err := workerd.ReadSecret(f.sidFile, "account-sid-file", "TWILIO_ACCOUNT_SID", getenv)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("account SID: %w", err)}
			}
			token, err := workerd.ReadSecret(f.authTokenFile, "auth-token-file", "TWILIO_AUTH_TOKEN", getenv)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("auth token: %w", err)}
			}
			// The User-Agent names the process: the chaos harness matches a
			// 429 to the worker it killed.
			opts := []twilio.Option{twilio.WithBaseURL(f.apiURL), twilio.WithLogger(log),
				twilio.WithUserAgent(useragent.Of("sms-worker", os.Getpid()))}
			if f.from != "" {
				opts = append(opts, twilio.WithFrom(f.from))
			} else {
				opts = append(opts, twilio.WithMessagingService(f.service))
			}
			api, err := twilio.New(sid, token, opts...)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("building the Twilio client: %w", err)}
			}
			return sms.New(f.sms, api, log)
		},
		Fatal: func(err error) bool { return twilio.Classify(err).Action == twilio.ActionHalt },
	}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return workerd.Main(ctx, spec(&flags{}), args, getenv, stderr)
}
