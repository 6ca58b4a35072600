// Command max-worker pulls notifications for MAX (VK's messenger) from the
// NOTIFY stream and sends them with the MAX Bot API, once and in order per
// recipient, within MAX's limits. The delivery engine is pkg/delivery, the
// MAX channel pkg/channel/max, the daemon's shared wiring internal/workerd;
// this file declares MAX's flags.
//
// The bot token comes from $MAX_BOT_TOKEN or -token-file, never from a flag
// value.
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
	maxchannel "github.com/tgnotify/tgnotify/pkg/channel/max"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
)

var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Getenv, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "max-worker:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

const usage = `Usage: max-worker [flags]

Sends notifications from the NOTIFY stream (notify.max.<recipient>) to MAX
users and chats with the MAX Bot API (POST /messages, HTML), and moves those
MAX cannot deliver to the next channel of their route. Every flag can also be
set as MAX_WORKER_<FLAG> or in the -config YAML file; an explicit flag wins
over the environment, which wins over the file. $NATS_URL sets -nats too. The
bot token is read from $MAX_BOT_TOKEN or -token-file.

`

type flags struct {
	max       maxchannel.Config
	apiURL    string
	tokenFile string
	caFile    string
}

func spec(f *flags) workerd.Spec {
	return workerd.Spec{
		Channel:   maxchannel.Name,
		EnvPrefix: "MAX_WORKER",
		HTTP:      "127.0.0.1:9104",
		Usage:     usage,
		Version:   version,
		Register: func(cs *config.Set, _ *delivery.Config) {
			config.String(cs, &f.apiURL, "max-api", maxapi.DefaultBaseURL, "MAX Bot API base `URL` (or the emulator)")
			config.String(cs, &f.tokenFile, "token-file", "", "`file` holding the bot token (default: $MAX_BOT_TOKEN)")
			config.String(cs, &f.caFile, "max-ca", "", "PEM `file` of CA certificates added to the system's for the MAX API (its host uses the Russian Ministry of Digital Development's root CA)")
			m := &f.max
			config.Float(cs, &m.Rate, "bot-rate", maxchannel.DefaultRate, "requests per second for the whole bot (MAX: 30)").Check(config.Positive)
			config.Float(cs, &m.UserRate, "user-rate", maxchannel.DefaultUserRate, "messages per second to one user").Check(config.Positive)
			config.Float(cs, &m.ChatPerMinute, "chat-per-minute", maxchannel.DefaultChatPerMinute, "messages per minute to one chat").Check(config.Positive)
			config.Duration(cs, &m.RetryAfter, "retry-after", maxchannel.DefaultRetryAfter, "pause after a 429 that says no Retry-After").Check(config.Positive)
			config.Bool(cs, &m.DisableLinkPreview, "disable-link-preview", false, "no previews of the links in a notification")
		},
		Build: func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error) {
			token, err := workerd.ReadSecret(f.tokenFile, "token-file", "MAX_BOT_TOKEN", getenv)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("bot token: %w", err)}
			}
			// The User-Agent names the process: the chaos harness matches a
			// 429 to the worker it killed.
			opts := []maxapi.Option{maxapi.WithBaseURL(f.apiURL), maxapi.WithLogger(log),
				maxapi.WithUserAgent(useragent.Of("max-worker", os.Getpid()))}
			if f.caFile != "" {
				opts = append(opts, maxapi.WithCAFile(f.caFile))
			}
			api, err := maxapi.New(token, opts...)
			if err != nil {
				return nil, daemon.UsageError{Err: fmt.Errorf("MAX API client: %w", err)}
			}
			return maxchannel.New(f.max, api)
		},
		Fatal: func(err error) bool { return maxapi.Classify(err).Action == maxapi.ActionHalt },
	}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return workerd.Main(ctx, spec(&flags{}), args, getenv, stderr)
}
