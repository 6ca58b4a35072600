// Command telegram-worker pulls notifications from the NOTIFY stream and
// sends them with the Telegram Bot API, within Telegram's limits, once and in
// order per chat. The delivery engine is pkg/delivery, the Telegram channel
// pkg/channel/telegram, the daemon's shared wiring internal/workerd; this
// file declares Telegram's flags.
//
// The bot token comes from $TELEGRAM_BOT_TOKEN or -token-file, never from a
// flag value, so it does not show in process listings or shell history.
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
	"github.com/tgnotify/tgnotify/internal/workerd"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
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

`

// flags are Telegram's own settings.
type flags struct {
	telegram  telegram.Config
	apiURL    string
	tokenFile string
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
		},
		Build: func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error) {
			token, err := workerd.ReadSecret(f.tokenFile, "token-file", "TELEGRAM_BOT_TOKEN", getenv)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("bot token: %w", err)}
			}
			// The engine bounds each request (and raises the bound while
			// Telegram answers slowly); the client's own timeout is the
			// longest it may become.
			api, err := botapi.New(token, botapi.WithBaseURL(f.apiURL), botapi.WithLogger(log))
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("bot API client: %w", err)}
			}
			return telegram.New(f.telegram, api)
		},
		Fatal: func(err error) bool { return botapi.Classify(err).Action == botapi.ActionHalt },
	}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return workerd.Main(ctx, spec(&flags{}), args, getenv, stderr)
}
