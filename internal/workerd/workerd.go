// Package workerd is the wiring every channel worker daemon shares
// (cmd/telegram-worker, cmd/max-worker, cmd/email-worker, cmd/sms-worker):
// the configuration of the delivery engine and of the NATS connection, the
// JetStream objects, the start-up check of the provider's credentials, the
// HTTP endpoints (/metrics /healthz /readyz /stats) and the run group. A
// channel's main declares its own flags and builds its channel; everything
// else is here, written once.
package workerd

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
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Spec is one channel's worker daemon.
type Spec struct {
	// Channel is the channel's name: telegram, max, email, sms.
	Channel string
	// EnvPrefix makes every flag settable as <EnvPrefix>_<FLAG>
	// (TELEGRAM_WORKER).
	EnvPrefix string
	// HTTP is the default address of the HTTP endpoints.
	HTTP string
	// Usage is printed by -h above the flags.
	Usage string
	// HaltProbeFlag names the flag of the engine's HaltProbe; default
	// "halt-probe" (the telegram worker keeps its "token-probe").
	HaltProbeFlag string
	// Register binds the channel's own flags; the engine's, NATS's, the
	// JetStream declaration's and logging's are bound here.
	Register func(cs *config.Set, engine *delivery.Config)
	// Build makes the channel once the flags are parsed. getenv reads
	// secrets from the environment; a configuration mistake is a
	// daemon.UsageError or a config.Error.
	Build func(log *slog.Logger, getenv func(string) string) (delivery.Channel, error)
	// Fatal reports whether the start-up probe's error means the
	// configuration is wrong (credentials rejected): the daemon then stops
	// at once instead of starting and retrying.
	Fatal func(err error) bool
	// Version is the daemon's version as the build stamped it, for
	// -version, the logs and tgnotify_build_info (daemon.Version fills in
	// what the Go toolchain recorded when it is "dev").
	Version string
	// Services, when set, returns the channel's own services, run in the
	// run group beside the worker once it is built (the Telegram bot's
	// update intake); nil ones are skipped. A configuration mistake is a
	// daemon.UsageError.
	Services func(env Env) ([]Service, error)
}

// Env is what a channel's services get from the daemon.
type Env struct {
	// Worker is the delivery engine (delivery.Worker.ChangeRecipient).
	Worker *delivery.Worker
	// Resources are the consumer and the buckets.
	Resources *jetstream.WorkerResources
	// Logger and Registry are the daemon's.
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Service runs until ctx ends and returns nil, or an error that stops the
// daemon.
type Service func(ctx context.Context) error

// Settings are what the shared flags configure.
type Settings struct {
	// Engine is the delivery engine's configuration.
	Engine delivery.Config
	// NATS is the connection's.
	NATS        jetstream.Options
	jetstream   daemon.JetStreamFlags
	http        daemon.HTTPFlags
	log         daemon.LogFlags
	showVersion bool
	config      *config.Set
}

// Parse reads the flags, $<EnvPrefix>_* and the -config file into the
// engine's configuration and the channel's (through spec.Register). Every
// mistake is an error matching config.ErrInvalid that names the flag.
func Parse(spec Spec, args []string, getenv func(string) string, out io.Writer) (*Settings, error) {
	s := &Settings{}
	name := spec.Channel + "-worker"
	cs := config.New(name, config.Options{EnvPrefix: spec.EnvPrefix, ConfigFlag: "config", Output: out, Usage: spec.Usage, Getenv: getenv})
	s.config = cs
	daemon.NATSFlags(cs, &s.NATS)
	s.http.Register(cs, spec.HTTP, "`address` of /metrics, /healthz, /readyz and /stats")
	w, def := &s.Engine, delivery.DefaultConfig()
	if spec.Register != nil {
		spec.Register(cs, w)
	}
	inFlight := fmt.Sprintf("concurrent requests to the provider; 0: the channel's rate × %v, %d to %d (%d with -single-record-writes; %d up to %v msg/s)",
		delivery.InFlightHorizon, delivery.DefaultMaxInFlight, delivery.MaxDerivedInFlight, delivery.MaxDerivedInFlightSingleWrites,
		delivery.DefaultMaxInFlight, float64(delivery.DefaultMaxInFlight)/delivery.InFlightHorizon.Seconds())
	if spec.Channel == "telegram" {
		inFlight += fmt.Sprintf("; %d with -paid-broadcast", delivery.InFlightFor(telegram.PaidBroadcastRate, false))
	}
	config.Int(cs, &w.MaxInFlight, "max-in-flight", def.MaxInFlight, inFlight).Check(config.NotNegative)
	config.Int(cs, &w.MaxAttempts, "max-attempts", def.MaxAttempts, "transient failures before a notification moves to the next channel of its route (or is dead-lettered) as max_attempts").Check(config.AtLeast(1))
	base := config.Duration(cs, &w.BackoffBase, "backoff-base", def.BackoffBase, "first retry delay ceiling; doubles per attempt, full jitter").Check(config.Positive)
	config.Duration(cs, &w.BackoffCap, "backoff-cap", def.BackoffCap, "largest retry delay ceiling").Check(config.AtLeastFlag(base))
	config.Uint32(cs, &w.BreakerFailures, "breaker-failures", def.BreakerFailures, "consecutive transient failures that open the circuit breaker").Check(config.AtLeast[uint32](1))
	config.Duration(cs, &w.BreakerOpen, "breaker-open", def.BreakerOpen, "how long the breaker stays open before a probe").Check(config.Positive)
	config.Int(cs, &w.LaneCap, "lane-cap", def.LaneCap, "messages of one recipient held in memory; more wait in the stream").Check(config.AtLeast(1))
	config.Duration(cs, &w.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "how long a stop waits for requests in flight").Check(config.Positive)
	probe := spec.HaltProbeFlag
	if probe == "" {
		probe = "halt-probe"
	}
	config.Duration(cs, &w.HaltProbe, probe, def.HaltProbe, "how often rejected credentials are checked again while sending is halted").Check(config.Positive)
	config.Int(cs, &w.RememberDelivered, "remember-delivered", def.RememberDelivered, "recently delivered keys kept in memory besides the KV bucket").Check(config.NotNegative)
	config.Duration(cs, &w.StatsInterval, "stats-interval", def.StatsInterval, "how often queue depth and dead letters are read").Check(config.Positive)
	config.DurationOrNever(cs, &w.FallbackTransactional, "fallback-after-transactional", def.FallbackTransactional,
		"how long a transactional notification without a fallback_after of its own stays on this channel before it moves to the next one of its route (or never)")
	config.DurationOrNever(cs, &w.FallbackBulk, "fallback-after-bulk", def.FallbackBulk,
		"the same for bulk notifications (or never)")
	timeout := config.Duration(cs, &w.RequestTimeout, "request-timeout", def.RequestTimeout, "timeout of one request to the provider while it answers fast").Check(config.Positive)
	config.Duration(cs, &w.MaxRequestTimeout, "max-request-timeout", def.MaxRequestTimeout, "the longest the request timeout grows to while the provider answers slowly").Check(config.AtLeastFlag(timeout))
	config.Duration(cs, &w.SlowThreshold, "slow-threshold", def.SlowThreshold, "answers slower than this (90th percentile) lower the send rate and raise the request timeout").Check(config.Positive)
	config.Float(cs, &w.MinRateFraction, "min-rate-fraction", def.MinRateFraction, "the lowest share of the channel's rate a slow provider brings the send rate down to").Check(config.Between(0.001, 1.0))
	config.Int(cs, &w.StormThreshold, "storm-threshold", def.StormThreshold, "429s within -storm-window that make bulk notifications wait while transactional ones go").Check(config.AtLeast(1))
	config.Duration(cs, &w.StormWindow, "storm-window", def.StormWindow, "the window of -storm-threshold").Check(config.Positive)
	config.Int(cs, &w.BacklogThreshold, "backlog-threshold", def.BacklogThreshold, "messages of the channel waiting above which bulk waits while transactional goes (0: off)").Check(config.NotNegative)
	config.Duration(cs, &w.DeadRetryAfter, "dead-retry-after", def.DeadRetryAfter,
		"how long after a recipient was found dead its next message is sent for real once more: delivered revives it, dead again starts another period (0: never)").Check(config.NotNegative)
	config.Bool(cs, &w.SingleRecordWrites, "single-record-writes", def.SingleRecordWrites,
		"write each delivery record, send claim and event on its own, never in atomic batches: for a nats-server without sync_interval: always, where a batch costs more than the fsyncs it saves")
	config.Bool(cs, &w.StrictRate, "strict-rate", def.StrictRate,
		"keep every second's sends within the channel's rate, even those that make good a stall; by default a second may hold up to a quarter more, only to make good what a stall held back, and the rate holds over any longer span")
	config.String(cs, &w.PauseFile, "pause-file", def.PauseFile,
		"`file` on this host where the worker keeps the 429 pauses it announces, read at start: a worker restarted in place knows a pause that notify_chats could not store before the kill (one file per worker; its directory must exist; empty: none)")

	// The consumer, stream and bucket settings are the JetStream
	// declaration's.
	s.jetstream.Register(cs, jetstream.FlagReplicas, jetstream.FlagDuplicates, jetstream.FlagMaxAge, jetstream.FlagDeadMaxAge,
		jetstream.FlagDeliveredTTL, jetstream.FlagAttemptsTTL, jetstream.FlagAckWait, jetstream.FlagMaxAckPending, jetstream.FlagPinnedTTL)
	s.log.Register(cs)
	config.Bool(cs, &s.showVersion, "version", false, "print the version and exit")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	// Every rule of Validate is declared on a flag above; this only catches
	// one that was not. (AckWait is the live consumer's, read at start.)
	if err := w.Validate(); err != nil {
		return nil, &config.Error{Err: err}
	}
	return s, nil
}

// FlagSet returns the flags the settings were parsed from.
func (s *Settings) FlagSet() *flag.FlagSet { return s.config.FlagSet() }

// Main runs the worker daemon of spec until SIGINT or SIGTERM. It returns
// nil after a clean stop; a configuration mistake is an error that
// daemon.ExitCode maps to status 2.
func Main(ctx context.Context, spec Spec, args []string, getenv func(string) string, stderr io.Writer) error {
	s, err := Parse(spec, args, getenv, stderr)
	if err != nil {
		return err
	}
	version := daemon.Version(spec.Version)
	if s.showVersion {
		fmt.Fprintln(stderr, version)
		return nil
	}
	log, err := s.log.Logger(stderr)
	if err != nil {
		return err
	}
	name := spec.Channel + "-worker"
	log = log.With("daemon", name)
	log.Info("configuration", "pid", os.Getpid(), s.config.LogAttr())
	ch, err := spec.Build(log, getenv)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return err
		}
		var ue daemon.UsageError
		if !errors.As(err, &ue) {
			err = daemon.UsageError{Err: err}
		}
		return err
	}
	ln, err := daemon.Listen("http", s.http.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()

	// Until the run group owns the signals, SIGTERM cancels start-up, and
	// so do rejected credentials.
	startCtx, stopStart := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopStart()
	startCtx, abortStart := context.WithCancelCause(startCtx)
	defer abortStart(nil)
	probe := startProbe(ctx, ch, s.Engine.RequestTimeout, spec.Fatal, abortStart)
	defer probe.stop()
	rejected := func() error {
		if err := probe.fatal(); err != nil {
			return fmt.Errorf("%s rejected the credentials: %w", spec.Channel, err)
		}
		return nil
	}
	s.NATS.Name = name
	reconnects := &jetstream.Reconnects{}
	s.NATS.Reconnects = reconnects
	nc, err := jetstream.Connect(startCtx, s.NATS, log)
	if err != nil {
		if r := rejected(); r != nil {
			return r
		}
		return daemon.UsageError{Err: err}
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	reg := daemon.NewRegistry(daemon.BuildInfo(name, version))
	res, err := prepare(startCtx, js, spec.Channel, s, log, reg)
	if r := rejected(); r != nil {
		return r
	}
	if errors.Is(err, context.Canceled) {
		log.Info("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	// Rejected credentials are a configuration error: say so and stop. The
	// provider being unreachable is not: the worker starts and retries.
	err = probe.wait(startCtx)
	if r := rejected(); r != nil {
		return r
	}
	if startCtx.Err() != nil {
		log.Info("stopped during start-up")
		return nil
	}
	var limited *delivery.RateLimitedError
	switch {
	case err == nil:
		log.Info("the provider accepts the credentials", "channel", spec.Channel)
	case errors.As(err, &limited):
		// An announced pause: kept before the first request (below).
		log.Warn("the provider rate-limits the bot now; starting paused", "retry_after", limited.RetryAfter, "err", err)
	default:
		log.Warn("cannot check the credentials now; starting anyway", "err", err)
	}
	// Hand the signals to the run group's handler without a gap in which
	// SIGTERM would kill the process.
	var g run.Group
	g.Add(daemon.SignalHandler(ctx))
	stopStart()
	w, err := delivery.New(s.Engine, delivery.Deps{JS: js, Resources: res, Channel: ch, Logger: log, Registry: reg, Reconnects: reconnects})
	if err != nil {
		return daemon.UsageError{Err: err}
	}
	if limited != nil {
		w.PauseUntil(limited.At.Add(limited.RetryAfter), "429 at start-up: "+limited.Error())
	}

	runCtx, stop := context.WithCancel(ctx)
	g.Add(func() error { return w.Run(runCtx) }, func(error) { stop() })
	if spec.Services != nil {
		services, err := spec.Services(Env{Worker: w, Resources: res, Logger: log, Registry: reg})
		if err != nil {
			var ue daemon.UsageError
			if !errors.As(err, &ue) {
				err = daemon.UsageError{Err: err}
			}
			return err
		}
		for _, svc := range services {
			if svc == nil {
				continue
			}
			sctx, cancel := context.WithCancel(ctx)
			g.Add(func() error { return svc(sctx) }, func(error) { cancel() })
		}
	}
	daemon.AddHTTP(&g, ln, s.http.Endpoints(daemon.Endpoints{
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
	}).Handler(), log, s.http.Options()...)
	lim := ch.Limits()
	log.Info(name+" starting", "version", version, "pprof", s.http.Pprof, "nats", jetstream.RedactURL(s.NATS.ServerURLs()), "rate", float64(lim.Rate),
		"max_in_flight", w.MaxInFlight())
	err = g.Run()
	switch {
	case daemon.SignalStopped(err):
		log.Info(name+" stopped", "reason", err.Error())
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		log.Info(name + " stopped")
		return nil
	}
	return err
}

// prepare makes sure the streams, the channel's consumer and the buckets
// exist (see daemon.Objects: created if missing with -provision, never
// changed, drift reported), retrying while NATS is unreachable, until ctx
// ends. It opens them and takes the worker's ack wait from the live
// consumer, so that a consumer whose ack wait drifted from the declaration
// is still kept alive in time.
func prepare(ctx context.Context, js natsjs.JetStream, channel string, s *Settings, log *slog.Logger, reg prometheus.Registerer) (*jetstream.WorkerResources, error) {
	decl, err := jetstream.Declare(s.jetstream.Settings).ForWorker(channel)
	if err != nil {
		return nil, &config.Error{Flag: "jetstream-config", Value: s.jetstream.Source(), Err: err}
	}
	objects, err := daemon.NewObjects(decl, s.jetstream, log, reg)
	if err != nil {
		return nil, err
	}
	res, err := openWorker(ctx, js, objects, s.jetstream.Settings.Names(), channel, log)
	if err != nil {
		return nil, err
	}
	consumer := jetstream.ConsumerName(channel)
	ackWait := res.Consumer.CachedInfo().Config.AckWait
	if ackWait < time.Second {
		return nil, fmt.Errorf("consumer %s has an ack wait of %v; the worker needs at least 1s: fix it with `tgnotify provision` (or nats consumer edit)",
			consumer, ackWait)
	}
	s.Engine.AckWait = ackWait
	log.Info("consumer ready", "consumer", consumer, "stream", res.Names.Stream, "ack_wait", ackWait.String(),
		"max_ack_pending", res.Consumer.CachedInfo().Config.MaxAckPending, "declaration", s.jetstream.Source())
	return res, nil
}

// openWorker waits for the JetStream objects and opens the channel's
// consumer and buckets, both again while JetStream does not answer: the
// objects can be read and the next request still meet an election (the
// long cluster chaos run: an SMS worker started then exited with "opening
// bucket notify_delivered: context deadline exceeded"); its lookups are
// hedged (daemon.Hedged), so one lost in an election costs at most half a
// second after it. It fails only when ctx ends or the objects conflict
// with the declaration.
func openWorker(ctx context.Context, js natsjs.JetStream, objects *daemon.Objects, names jetstream.Names, channel string, log *slog.Logger) (*jetstream.WorkerResources, error) {
	const maxDelay = 5 * time.Second
	delay := 200 * time.Millisecond
	for {
		if err := objects.Wait(ctx, js); err != nil {
			return nil, err
		}
		octx, cancel := context.WithTimeout(ctx, openTimeout)
		res, err := jetstream.OpenWorker(octx, daemon.Hedged(js), names, channel)
		cancel()
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("cannot open the consumer and buckets yet; retrying", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, maxDelay)
	}
}

// openTimeout bounds one attempt of openWorker to open the consumer and
// buckets.
const openTimeout = 10 * time.Second

// ReadSecret returns a secret from the file named by a flag, else from an
// environment variable, trimmed; what names them goes into the error when
// neither gives one.
func ReadSecret(file, fileFlag, env string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", daemon.UsageError{Err: fmt.Errorf("-%s: %w", fileFlag, err)}
		}
		return strings.TrimSpace(string(b)), nil
	}
	if v := strings.TrimSpace(getenv(env)); v != "" {
		return v, nil
	}
	return "", daemon.UsageError{Err: fmt.Errorf("no secret: set %s or -%s", env, fileFlag)}
}
