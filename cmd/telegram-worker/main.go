// Command telegram-worker pulls notifications from the NOTIFY stream and
// sends them with the Telegram Bot API, within Telegram's limits, once and in
// order per chat. The delivery engine is pkg/delivery, the Telegram channel
// pkg/channel/telegram, the daemon's shared wiring internal/workerd; this
// file declares Telegram's flags.
//
// The bot token comes from $TELEGRAM_BOT_TOKEN or -token-file, never from a
// flag value, so it does not show in process listings or shell history.
//
// With -intake poll or -intake webhook the worker also takes the bot's
// updates (pkg/intake) to learn of chats that block or unblock the bot; the
// webhook's secret token comes from $TELEGRAM_WEBHOOK_SECRET or
// -intake-webhook-secret-file.
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
	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/internal/workerd"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/intake"
)

var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Getenv, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "telegram-worker:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

const usage = `Usage: telegram-worker [flags]

Sends notifications from the NOTIFY stream to Telegram. At start it creates
the streams, its consumer and buckets if they are missing, as the
-jetstream-config declaration says, and reports where the live objects differ
from it; it never changes them (tgnotify provision does). It keeps held
messages alive by the live consumer's ack wait.

Every flag can also be set as TELEGRAM_WORKER_<FLAG> (upper case, dashes as
underscores) or in the -config YAML file; an explicit flag wins over the
environment, which wins over the file. $NATS_URL sets -nats too. The bot token
is read from $TELEGRAM_BOT_TOKEN or -token-file.

-intake poll or webhook makes the worker take the bot's updates (off by
default: Telegram gives them to one consumer, which may be the application),
so that a chat that blocks or unblocks the bot, or sends /start, is marked
dead or alive at once. The webhook's secret token is read from
$TELEGRAM_WEBHOOK_SECRET or -intake-webhook-secret-file.

`

// flags are Telegram's own settings.
type flags struct {
	telegram  telegram.Config
	apiURL    string
	tokenFile string
	intake    intakeFlags
}

// intakeFlags are the update intake's settings, and what Build makes of
// them.
type intakeFlags struct {
	mode       string
	poll       intake.PollConfig
	listen     string
	webhook    intake.WebhookConfig
	secretFile string
	// bot is the intake's Bot API client: its own, since the engine's
	// bounds every request by the send timeout.
	bot *botapi.Client
}

// register binds the intake's flags.
func (in *intakeFlags) register(cs *config.Set) {
	config.String(cs, &in.mode, "intake", string(intake.DefaultMode),
		"take the bot's updates to learn of chats that block or unblock the bot: off (the application owns them), poll (getUpdates; one worker polls at a time) or webhook").
		Check(func(v string) error { _, err := intake.ParseMode(v); return err })
	config.Duration(cs, &in.poll.Timeout, "intake-poll-timeout", intake.DefaultPollTimeout, "getUpdates' long poll (whole seconds)").
		Check(config.Between(time.Second, 50*time.Second))
	config.Duration(cs, &in.poll.LeaseTTL, "intake-lease-ttl", intake.DefaultLeaseTTL,
		"the poller's lease: a standby starts polling this long after the poller stopped renewing it").Check(config.AtLeast(time.Second))
	config.Duration(cs, &in.poll.ConflictRetry, "intake-conflict-retry", intake.DefaultConflictRetry,
		"how long the poller waits after Telegram answered that a webhook takes the updates (409) before it asks again").Check(config.Positive)
	config.String(cs, &in.listen, "intake-listen", "127.0.0.1:9112", "`address` of the webhook endpoint (-intake webhook), for a reverse proxy terminating TLS")
	config.String(cs, &in.webhook.Path, "intake-webhook-path", intake.DefaultWebhookPath, "path of the webhook endpoint")
	config.String(cs, &in.webhook.URL, "intake-webhook-url", "",
		"public HTTPS `URL` of the webhook endpoint, registered with setWebhook at start (empty: register it yourself)")
	config.String(cs, &in.secretFile, "intake-webhook-secret-file", "", "`file` holding the webhook's secret token (default: $TELEGRAM_WEBHOOK_SECRET)")
}

// build checks the intake's settings once the flags are parsed and makes
// its client.
func (in *intakeFlags) build(token, apiURL string, log *slog.Logger, getenv func(string) string) error {
	mode, err := intake.ParseMode(in.mode)
	if err != nil || mode == intake.ModeOff {
		return err
	}
	if mode == intake.ModeWebhook {
		secret, err := workerd.ReadSecret(in.secretFile, "intake-webhook-secret-file", "TELEGRAM_WEBHOOK_SECRET", getenv)
		if err != nil {
			return daemon.UsageError{Err: fmt.Errorf("-intake webhook needs a secret token: %w", err)}
		}
		if err := intake.CheckSecret(secret); err != nil {
			return daemon.UsageError{Err: fmt.Errorf("-intake-webhook-secret-file or $TELEGRAM_WEBHOOK_SECRET: %w", err)}
		}
		in.webhook.Secret = secret
	}
	if in.bot, err = botapi.New(token, botapi.WithBaseURL(apiURL), botapi.WithLogger(log)); err != nil {
		return daemon.UsageError{Err: fmt.Errorf("bot API client: %w", err)}
	}
	return nil
}

// services returns the intake's service for the run group, if it is on.
func (in *intakeFlags) services(env workerd.Env) ([]workerd.Service, error) {
	switch mode, _ := intake.ParseMode(in.mode); mode {
	case intake.ModePoll:
		p, err := intake.NewPoller(in.poll, intake.PollerDeps{Bot: in.bot, Chats: env.Resources.Chats, Recipients: env.Worker,
			Logger: env.Logger, Registry: env.Registry})
		if err != nil {
			return nil, err
		}
		return []workerd.Service{p.Run}, nil
	case intake.ModeWebhook:
		h, err := intake.NewWebhook(in.webhook, intake.WebhookDeps{Bot: in.bot, Recipients: env.Worker, Logger: env.Logger, Registry: env.Registry})
		if err != nil {
			return nil, err
		}
		ln, err := daemon.Listen("intake-listen", in.listen)
		if err != nil {
			return nil, err
		}
		return []workerd.Service{func(ctx context.Context) error {
			defer ln.Close()
			return h.Serve(ctx, ln)
		}}, nil
	}
	env.Logger.Info("update intake off: chats come back by tgnotify chat revive or -dead-retry-after")
	return nil, nil
}

// spec declares the telegram worker on the shared wiring.
func spec(f *flags) workerd.Spec {
	return workerd.Spec{
		Channel:       telegram.Name,
		EnvPrefix:     "TELEGRAM_WORKER",
		HTTP:          "127.0.0.1:9102",
		Usage:         usage,
		HaltProbeFlag: "token-probe",
		Version:       version,
		Register: func(cs *config.Set, _ *delivery.Config) {
			config.String(cs, &f.apiURL, "telegram-api", botapi.DefaultBaseURL, "Bot API base `URL` (a local Bot API server or the emulator)")
			config.String(cs, &f.tokenFile, "token-file", "", "`file` holding the bot token (default: $TELEGRAM_BOT_TOKEN)")
			tg := &f.telegram
			rate := config.Float(cs, &tg.BotRate, "bot-rate", telegram.DefaultBotRate, "bot-wide messages per second (with -paid-broadcast and no -bot-rate: 1000)").
				Check(config.Positive)
			config.Bool(cs, &tg.PaidBroadcast, "paid-broadcast", false, "send with allow_paid_broadcast: up to 1000 msg/s, 0.1 Telegram Star per message").
				Check(func(on bool) error {
					if on && rate.IsSet() && tg.BotRate <= telegram.DefaultBotRate {
						return fmt.Errorf("requires %s above %d (got %s); paid broadcast costs 0.1 Star a message and only pays off above Telegram's free %d msg/s: raise %s or drop -paid-broadcast",
							rate.Flag(), telegram.DefaultBotRate, rate.Text(), telegram.DefaultBotRate, rate.Flag())
					}
					return nil
				})
			config.Float(cs, &tg.ChatRate, "chat-rate", telegram.DefaultChatRate, "messages per second to one private chat").Check(config.Positive)
			config.Float(cs, &tg.GroupPerMinute, "group-per-minute", telegram.DefaultGroupPerMinute, "messages per minute to one group (chat id < 0)").Check(config.Positive)
			cs.Check(func() error {
				if tg.PaidBroadcast && !rate.IsSet() {
					tg.BotRate = telegram.PaidBroadcastRate
				}
				return nil
			})
			f.intake.register(cs)
		},
		Build: func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error) {
			token, err := workerd.ReadSecret(f.tokenFile, "token-file", "TELEGRAM_BOT_TOKEN", getenv)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("bot token: %w", err)}
			}
			// The engine bounds each request (and raises the bound while
			// Telegram answers slowly); the client's own timeout is the
			// longest it may become.
			// The User-Agent names the process: the chaos harness matches a
			// 429 to the worker it killed.
			api, err := botapi.New(token, botapi.WithBaseURL(f.apiURL), botapi.WithLogger(log),
				botapi.WithUserAgent(useragent.Of("telegram-worker", os.Getpid())))
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("bot API client: %w", err)}
			}
			if err := f.intake.build(token, f.apiURL, log, getenv); err != nil {
				return nil, err
			}
			return telegram.New(f.telegram, api)
		},
		Services: f.intake.services,
		Fatal:    func(err error) bool { return botapi.Classify(err).Action == botapi.ActionHalt },
	}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return workerd.Main(ctx, spec(&flags{}), args, getenv, stderr)
}
