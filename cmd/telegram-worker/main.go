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
	streams     jetstream.StreamSettings
	consumer    jetstream.WorkerSettings
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

Sends notifications from the NOTIFY stream to Telegram. Every flag can also be
set as TELEGRAM_WORKER_<FLAG> (upper case, dashes as underscores) or in the
-config YAML file; an explicit flag wins over the environment, which wins over
the file. $NATS_URL sets -nats too. The bot token is read from
$TELEGRAM_BOT_TOKEN or -token-file.

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

	c := &s.consumer
	config.Duration(cs, &c.AckWait, "ack-wait", jetstream.DefaultAckWait, "consumer ack wait; held messages are kept alive every third of it").Check(config.AtLeast(time.Second))
	config.Int(cs, &c.MaxAckPending, "max-ack-pending", jetstream.DefaultMaxAckPending, "messages delivered to the worker and not yet acked").Check(config.AtLeast(1))
	config.Duration(cs, &c.PinnedTTL, "pinned-ttl", jetstream.DefaultPinnedTTL, "how long the active worker may go without pulling before a standby takes over").Check(config.AtLeast(time.Second))
	config.Duration(cs, &c.DeliveredTTL, "delivered-ttl", jetstream.DefaultDeliveredTTL, "how long a delivery record is kept (replays within it are never sent twice)").Check(config.Positive)
	config.Duration(cs, &c.AttemptsTTL, "attempts-ttl", jetstream.DefaultAttemptsTTL, "how long an attempt counter is kept").Check(config.Positive)
	config.Int(cs, &c.Replicas, "replicas", jetstream.DefaultReplicas, "replicas of streams, consumer and buckets (3 on a cluster)").Check(config.Between(1, 5))
	window := config.Duration(cs, &s.streams.Duplicates, "duplicate-window", jetstream.DefaultDuplicates, "NOTIFY de-duplication window").
		Check(config.AtLeast(jetstream.MinDuplicates))
	config.Duration(cs, &s.streams.MaxAge, "max-age", jetstream.DefaultMaxAge, "how long NOTIFY keeps messages (at least -duplicate-window)").Check(config.AtLeastFlag(window))
	config.Duration(cs, &s.streams.DeadMaxAge, "dead-max-age", jetstream.DefaultDeadMaxAge, "how long NOTIFY_DEAD keeps dead letters").Check(config.Positive)
	s.log.Register(cs)
	config.Bool(cs, &s.showVersion, "version", false, "print the version and exit")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	if w.PaidBroadcast && !rate.IsSet() {
		w.BotRate = 0 // delivery's paid-broadcast default
	}
	w.AckWait = c.AckWait
	s.streams.Replicas = c.Replicas
	// Every rule of the Validate methods is declared on a flag above; this
	// only catches one that was not.
	for _, err := range []error{w.Validate(), c.Validate(), s.streams.Validate()} {
		if err != nil {
			return nil, &config.Error{Err: err}
		}
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
	w, err := delivery.New(s.worker, delivery.Deps{JS: js, Resources: res, API: api, Logger: log, Registry: reg})
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
		"bot_rate", s.worker.BotRate, "paid_broadcast", s.worker.PaidBroadcast)
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
