// Command telegram-worker pulls notifications from the NOTIFY stream and
// sends them with the Telegram Bot API, within Telegram's limits, once and in
// order per chat. The delivery logic lives in pkg/delivery; this file is
// wiring.
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
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Getenv, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "telegram-worker:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

// defaultHTTP is the worker's default address of its HTTP endpoints.
const defaultHTTP = "127.0.0.1:9102"

// freeBotRate is Telegram's bot-wide rate without paid broadcast: paying for
// a rate at or below it buys nothing.
const freeBotRate = 30

// settings are everything the flags configure.
type settings struct {
	nats        jetstream.Options
	jetstream   daemon.JetStreamFlags
	worker      delivery.Config
	apiURL      string
	tokenFile   string
	reqTimeout  time.Duration
	httpAddr    string
	log         daemon.LogFlags
	showVersion bool
	// config is where each setting came from, for the start-up log.
	config *config.Set
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

// parse reads flags, $TELEGRAM_WORKER_* and the -config file. Every mistake
// is an error matching config.ErrInvalid that names the flag.
func parse(args []string, out io.Writer) (*settings, error) {
	s := &settings{}
	cs := config.New("telegram-worker", config.Options{EnvPrefix: "TELEGRAM_WORKER", ConfigFlag: "config", Output: out, Usage: usage})
	s.config = cs
	daemon.NATSFlags(cs, &s.nats)
	config.String(cs, &s.apiURL, "telegram-api", botapi.DefaultBaseURL, "Bot API base `URL` (a local Bot API server or the emulator)")
	config.String(cs, &s.tokenFile, "token-file", "", "`file` holding the bot token (default: $TELEGRAM_BOT_TOKEN)")
	config.Duration(cs, &s.reqTimeout, "request-timeout", botapi.DefaultTimeout, "timeout of one Bot API request").Check(config.Positive)
	config.String(cs, &s.httpAddr, "http", defaultHTTP, "`address` of /metrics, /healthz, /readyz and /stats")

	w, def := &s.worker, delivery.DefaultConfig()
	rate := config.Float(cs, &w.BotRate, "bot-rate", def.BotRate, "bot-wide messages per second (with -paid-broadcast and no -bot-rate: 1000)").
		Check(config.Positive)
	config.Bool(cs, &w.PaidBroadcast, "paid-broadcast", def.PaidBroadcast, "send with allow_paid_broadcast: up to 1000 msg/s, 0.1 Telegram Star per message").
		Check(func(on bool) error {
			if on && rate.IsSet() && w.BotRate <= freeBotRate {
				return fmt.Errorf("requires %s above %d (got %s); paid broadcast costs 0.1 Star a message and only pays off above Telegram's free %d msg/s: raise %s or drop -paid-broadcast",
					rate.Flag(), freeBotRate, rate.Text(), freeBotRate, rate.Flag())
			}
			return nil
		})
	config.Float(cs, &w.ChatRate, "chat-rate", def.ChatRate, "messages per second to one private chat").Check(config.Positive)
	config.Float(cs, &w.GroupPerMinute, "group-per-minute", def.GroupPerMinute, "messages per minute to one group (chat id < 0)").Check(config.Positive)
	config.Int(cs, &w.MaxInFlight, "max-in-flight", def.MaxInFlight, "concurrent Bot API requests").Check(config.AtLeast(1))
	config.Int(cs, &w.MaxAttempts, "max-attempts", def.MaxAttempts, "transient failures before a notification is dead-lettered as max_attempts").Check(config.AtLeast(1))
	base := config.Duration(cs, &w.BackoffBase, "backoff-base", def.BackoffBase, "first retry delay ceiling; doubles per attempt, full jitter").Check(config.Positive)
	config.Duration(cs, &w.BackoffCap, "backoff-cap", def.BackoffCap, "largest retry delay ceiling").Check(config.AtLeastFlag(base))
	config.Uint32(cs, &w.BreakerFailures, "breaker-failures", def.BreakerFailures, "consecutive transient failures that open the circuit breaker").Check(config.AtLeast[uint32](1))
	config.Duration(cs, &w.BreakerOpen, "breaker-open", def.BreakerOpen, "how long the breaker stays open before a probe").Check(config.Positive)
	config.Int(cs, &w.LaneCap, "lane-cap", def.LaneCap, "messages of one chat held in memory; more wait in the stream").Check(config.AtLeast(1))
	config.Duration(cs, &w.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "how long a stop waits for requests in flight").Check(config.Positive)
	config.Duration(cs, &w.HaltProbe, "token-probe", def.HaltProbe, "how often a rejected token is checked again with getMe").Check(config.Positive)
	config.Int(cs, &w.RememberDelivered, "remember-delivered", def.RememberDelivered, "recently delivered keys kept in memory besides the KV bucket").Check(config.NotNegative)
	config.Duration(cs, &w.StatsInterval, "stats-interval", def.StatsInterval, "how often queue depth and dead letters are read").Check(config.Positive)

	// The consumer, stream and bucket settings are the JetStream
	// declaration's; the worker's flags for them are gone.
	s.jetstream.Register(cs, jetstream.FlagReplicas, jetstream.FlagDuplicates, jetstream.FlagMaxAge, jetstream.FlagDeadMaxAge,
		jetstream.FlagDeliveredTTL, jetstream.FlagAttemptsTTL, jetstream.FlagAckWait, jetstream.FlagMaxAckPending, jetstream.FlagPinnedTTL)
	s.log.Register(cs)
	config.Bool(cs, &s.showVersion, "version", false, "print the version and exit")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	if w.PaidBroadcast && !rate.IsSet() {
		w.BotRate = 0 // delivery's paid-broadcast default
	}
	// Every rule of Validate is declared on a flag above; this only catches
	// one that was not. (AckWait is the live consumer's, read at start.)
	if err := w.Validate(); err != nil {
		return nil, &config.Error{Err: err}
	}
	return s, nil
}

// readToken returns the bot token from -token-file or $TELEGRAM_BOT_TOKEN.
func readToken(file string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", daemon.UsageError{Err: fmt.Errorf("-token-file: %w", err)}
		}
		return strings.TrimSpace(string(b)), nil
	}
	if t := strings.TrimSpace(getenv("TELEGRAM_BOT_TOKEN")); t != "" {
		return t, nil
	}
	return "", daemon.UsageError{Err: errors.New("no bot token: set TELEGRAM_BOT_TOKEN or -token-file")}
}

func runMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	s, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if s.showVersion {
		fmt.Fprintln(stderr, version)
		return nil
	}
	log, err := s.log.Logger(stderr)
	if err != nil {
		return err
	}
	log = log.With("daemon", "telegram-worker")
	log.Info("configuration", s.config.LogAttr())
	token, err := readToken(s.tokenFile, getenv)
	if err != nil {
		return err
	}
	api, err := botapi.New(token, botapi.WithBaseURL(s.apiURL), botapi.WithTimeout(s.reqTimeout), botapi.WithLogger(log))
	if err != nil {
		return daemon.UsageError{Err: fmt.Errorf("bot API client: %w", err)}
	}
	ln, err := daemon.Listen("http", s.httpAddr)
	if err != nil {
		return err
	}
	defer ln.Close()

	// A rejected token is a configuration error: say so and stop. Telegram
	// being unreachable is not: the worker starts and retries.
	mctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	me, err := api.GetMe(mctx)
	cancel()
	switch d := botapi.Classify(err); {
	case err == nil:
		log.Info("bot token accepted", "bot", me.Username, "api", s.apiURL)
	case d.Action == botapi.ActionHalt:
		return fmt.Errorf("bot token rejected by Telegram at %s: %s", s.apiURL, d.Description)
	default:
		log.Warn("cannot check the bot token now; starting anyway", "err", err)
	}

	// Until the run group owns the signals, SIGTERM cancels start-up.
	startCtx, stopStart := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopStart()
	s.nats.Name = "telegram-worker"
	nc, err := jetstream.Connect(startCtx, s.nats, log)
	if err != nil {
		return daemon.UsageError{Err: err}
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	reg := daemon.NewRegistry()
	res, err := prepare(startCtx, js, s, log, reg)
	if errors.Is(err, context.Canceled) {
		log.Info("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	// Hand the signals to the run group's handler without a gap in which
	// SIGTERM would kill the process.
	var g run.Group
	g.Add(daemon.SignalHandler(ctx))
	stopStart()
	w, err := delivery.New(s.worker, delivery.Deps{JS: js, Resources: res, API: api, Logger: log, Registry: reg})
	if err != nil {
		return daemon.UsageError{Err: err}
	}

	runCtx, stop := context.WithCancel(ctx)
	g.Add(func() error { return w.Run(runCtx) }, func(error) { stop() })
	daemon.AddHTTP(&g, ln, daemon.Endpoints{
		Registry: reg,
		Ready: func() error {
			if !nc.IsConnected() {
				return errors.New("not connected to NATS")
			}
			return w.Ready()
		},
		Extra: map[string]http.Handler{"/stats": http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			daemon.WriteJSON(rw, http.StatusOK, w.Stats())
		})},
	}.Handler(), log)
	log.Info("telegram worker starting", "version", version, "nats", jetstream.RedactURL(s.nats.ServerURLs()),
		"bot_rate", s.worker.BotRate, "paid_broadcast", s.worker.PaidBroadcast)
	err = g.Run()
	switch {
	case daemon.SignalStopped(err):
		log.Info("telegram worker stopped", "reason", err.Error())
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		log.Info("telegram worker stopped")
		return nil
	}
	return err
}

// prepare makes sure the streams, the consumer and the buckets exist (see
// daemon.Objects: created if missing with -provision, never changed, drift
// reported), retrying while NATS is unreachable, until ctx ends. It opens
// them and takes the worker's ack wait from the live consumer, so that a
// consumer whose ack wait drifted from the declaration is still kept alive
// in time.
func prepare(ctx context.Context, js natsjs.JetStream, s *settings, log *slog.Logger, reg prometheus.Registerer) (*jetstream.WorkerResources, error) {
	decl, err := jetstream.Declare(s.jetstream.Settings).ForWorker(jetstream.DefaultChannel)
	if err != nil {
		return nil, &config.Error{Flag: "jetstream-config", Value: s.jetstream.Source(), Err: err}
	}
	objects, err := daemon.NewObjects(decl, s.jetstream, log, reg)
	if err != nil {
		return nil, err
	}
	if err := objects.Wait(ctx, js); err != nil {
		return nil, err
	}
	res, err := jetstream.OpenWorker(ctx, js, jetstream.DefaultChannel)
	if err != nil {
		return nil, err
	}
	ackWait := res.Consumer.CachedInfo().Config.AckWait
	if ackWait < time.Second {
		return nil, fmt.Errorf("consumer %s has an ack wait of %v; the worker needs at least 1s: fix it with `tgnotify provision` (or nats consumer edit)",
			jetstream.ConsumerTelegram, ackWait)
	}
	s.worker.AckWait = ackWait
	log.Info("consumer ready", "consumer", jetstream.ConsumerTelegram, "ack_wait", ackWait.String(),
		"max_ack_pending", res.Consumer.CachedInfo().Config.MaxAckPending, "declaration", s.jetstream.Source())
	return res, nil
}
