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

	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
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

// settings are everything the flags configure.
type settings struct {
	nats        jetstream.Options
	streams     jetstream.StreamSettings
	consumer    jetstream.WorkerSettings
	worker      delivery.Config
	telegram    telegram.Config
	apiURL      string
	tokenFile   string
	reqTimeout  time.Duration
	httpAddr    string
	log         daemon.LogFlags
	showVersion bool
}

// parse reads flags, $TELEGRAM_WORKER_* and the -config file.
func parse(args []string, out io.Writer) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("telegram-worker", flag.ContinueOnError)
	fs.SetOutput(out)
	s.nats.RegisterFlags(fs)
	fs.StringVar(&s.apiURL, "telegram-api", "https://api.telegram.org", "Bot API base `URL` (a local Bot API server or the emulator)")
	fs.StringVar(&s.tokenFile, "token-file", "", "`file` holding the bot token (default: $TELEGRAM_BOT_TOKEN)")
	fs.DurationVar(&s.reqTimeout, "request-timeout", 10*time.Second, "timeout of one Bot API request")
	fs.StringVar(&s.httpAddr, "http", "127.0.0.1:9102", "`address` of /metrics, /healthz, /readyz and /stats")
	w, tg := &s.worker, &s.telegram
	fs.Float64Var(&tg.BotRate, "bot-rate", 0, "bot-wide messages per second (default 30, or 1000 with -paid-broadcast)")
	fs.BoolVar(&tg.PaidBroadcast, "paid-broadcast", false, "send with allow_paid_broadcast: up to 1000 msg/s, 0.1 Telegram Star per message; needs -bot-rate above 30 or unset")
	fs.Float64Var(&tg.ChatRate, "chat-rate", telegram.DefaultChatRate, "messages per second to one private chat")
	fs.Float64Var(&tg.GroupPerMinute, "group-per-minute", telegram.DefaultGroupPerMinute, "messages per minute to one group (chat id < 0)")
	fs.IntVar(&w.MaxInFlight, "max-in-flight", 16, "concurrent Bot API requests")
	fs.IntVar(&w.MaxAttempts, "max-attempts", 10, "transient failures before a notification is dead-lettered as max_attempts")
	fs.DurationVar(&w.BackoffBase, "backoff-base", 2*time.Second, "first retry delay ceiling; doubles per attempt, full jitter")
	fs.DurationVar(&w.BackoffCap, "backoff-cap", 10*time.Minute, "largest retry delay ceiling")
	var breakerFailures uint
	fs.UintVar(&breakerFailures, "breaker-failures", 5, "consecutive transient failures that open the circuit breaker")
	fs.DurationVar(&w.BreakerOpen, "breaker-open", 30*time.Second, "how long the breaker stays open before a probe")
	fs.IntVar(&w.LaneCap, "lane-cap", 100, "messages of one chat held in memory; more wait in the stream")
	fs.DurationVar(&w.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a stop waits for requests in flight")
	fs.DurationVar(&w.HaltProbe, "token-probe", 30*time.Second, "how often a rejected token is checked again with getMe")
	fs.IntVar(&w.RememberDelivered, "remember-delivered", 100_000, "recently delivered keys kept in memory besides the KV bucket")
	fs.DurationVar(&w.StatsInterval, "stats-interval", 5*time.Second, "how often queue depth and dead letters are read")
	c := &s.consumer
	fs.DurationVar(&c.AckWait, "ack-wait", jetstream.DefaultAckWait, "consumer ack wait; held messages are kept alive every third of it")
	fs.IntVar(&c.MaxAckPending, "max-ack-pending", 10_000, "messages delivered to the worker and not yet acked")
	fs.DurationVar(&c.PinnedTTL, "pinned-ttl", jetstream.DefaultPinnedTTL, "how long the active worker may go without pulling before a standby takes over")
	fs.DurationVar(&c.DeliveredTTL, "delivered-ttl", jetstream.DefaultDeliveredTTL, "how long a delivery record is kept (replays within it are never sent twice)")
	fs.DurationVar(&c.AttemptsTTL, "attempts-ttl", jetstream.DefaultAttemptsTTL, "how long an attempt counter is kept")
	fs.IntVar(&c.Replicas, "replicas", 1, "replicas of streams, consumer and buckets (3 on a cluster)")
	fs.DurationVar(&s.streams.Duplicates, "duplicate-window", jetstream.DefaultDuplicates, "NOTIFY de-duplication window")
	fs.DurationVar(&s.streams.MaxAge, "max-age", jetstream.DefaultMaxAge, "how long NOTIFY keeps messages")
	fs.DurationVar(&s.streams.DeadMaxAge, "dead-max-age", jetstream.DefaultDeadMaxAge, "how long NOTIFY_DEAD keeps dead letters")
	s.log.Register(fs)
	fs.BoolVar(&s.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: telegram-worker [flags]

Sends notifications from the NOTIFY stream to Telegram. Every flag can also be
set as TELEGRAM_WORKER_<FLAG> (upper case, dashes as underscores) or in the
-config YAML file; an explicit flag wins over the environment, which wins over
the file. The bot token is read from $TELEGRAM_BOT_TOKEN or -token-file.

`)
		fs.PrintDefaults()
	}
	if err := daemon.Parse(fs, args, "TELEGRAM_WORKER"); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, daemon.UsageError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	w.BreakerFailures = uint32(breakerFailures)
	w.AckWait = c.AckWait
	s.streams.Replicas = c.Replicas
	if tg.PaidBroadcast && tg.BotRate == 0 {
		tg.BotRate = telegram.PaidBroadcastRate
	}
	for _, err := range []error{w.Validate(), tg.Validate(), c.Validate(), s.streams.Validate()} {
		if err != nil {
			return nil, daemon.UsageError{Err: errors.New(flagNames.Replace(err.Error()))}
		}
	}
	if s.reqTimeout <= 0 {
		return nil, daemon.UsageError{Err: fmt.Errorf("-request-timeout %v must be positive", s.reqTimeout)}
	}
	// The engine applies the request timeout to each attempt, and raises it
	// while Telegram answers slowly.
	w.RequestTimeout = s.reqTimeout
	return s, nil
}

// flagNames rewrites the field names in configuration errors as the flags
// that set them.
var flagNames = strings.NewReplacer(
	"{BotRate}", "-bot-rate", "BotRate", "-bot-rate", "ChatRate", "-chat-rate", "GroupPerMinute", "-group-per-minute", "PaidBroadcast", "-paid-broadcast",
	"{BackoffBase}", "-backoff-base",
	"MaxInFlight", "-max-in-flight", "MaxAttempts", "-max-attempts", "BackoffBase", "-backoff-base",
	"BackoffCap", "-backoff-cap", "BreakerOpen", "-breaker-open", "LaneCap", "-lane-cap",
	"AckWait", "-ack-wait", "ShutdownTimeout", "-shutdown-timeout", "HaltProbe", "-token-probe",
	"RememberDelivered", "-remember-delivered", "StatsInterval", "-stats-interval",
	"MaxAckPending", "-max-ack-pending", "PinnedTTL", "-pinned-ttl", "DeliveredTTL", "-delivered-ttl",
	"AttemptsTTL", "-attempts-ttl", "Replicas", "-replicas", "Duplicates", "-duplicate-window",
	"DeadMaxAge", "-dead-max-age", "MaxAge", "-max-age",
)

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
	res, err := provision(startCtx, js, s, log)
	if errors.Is(err, context.Canceled) {
		log.Info("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	stopStart()
	reg := daemon.NewRegistry()
	ch, err := telegram.New(s.telegram, api)
	if err != nil {
		return daemon.UsageError{Err: err}
	}
	w, err := delivery.New(s.worker, delivery.Deps{JS: js, Resources: res, Channel: ch, Logger: log, Registry: reg})
	if err != nil {
		return daemon.UsageError{Err: err}
	}

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
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
		"bot_rate", ch.Config().BotRate, "paid_broadcast", ch.Config().PaidBroadcast)
	err = g.Run()
	if daemon.SignalStopped(err) {
		log.Info("telegram worker stopped", "reason", err.Error())
		return nil
	}
	return err
}

// provision creates or updates the streams, the consumer and the buckets,
// retrying while NATS is unreachable, until ctx ends.
func provision(ctx context.Context, js natsjs.JetStream, s *settings, log *slog.Logger) (*jetstream.WorkerResources, error) {
	delay := 200 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := jetstream.ProvisionStreams(pctx, js, s.streams)
		var res *jetstream.WorkerResources
		if err == nil {
			res, err = jetstream.ProvisionWorker(pctx, js, s.consumer)
		}
		cancel()
		var conflict *jetstream.ConflictError
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &conflict):
			return nil, err
		}
		log.Warn("cannot provision JetStream yet; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}
