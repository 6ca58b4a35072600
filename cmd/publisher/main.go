// Command publisher drains an application's SQLite outbox into the NATS
// JetStream stream NOTIFY: once per row as far as the stream can tell, in
// outbox order per chat, within milliseconds of the application's commit.
// The drain loop lives in pkg/publisher; this file is wiring.
//
// Run one publisher per database; a second one waits as a hot standby and
// takes over when the first dies. See docs/PUBLISHER.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	err := runMain(context.Background(), os.Args[1:], os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "publisher:", err)
	}
	os.Exit(daemon.ExitCode(err))
}

// settings are everything the flags configure.
type settings struct {
	dbPath      string
	nats        jetstream.Options
	httpAddr    string
	pub         publisher.Options
	log         daemon.LogFlags
	showVersion bool
}

// parse reads flags, $PUBLISHER_* and the -config file. Every mistake is a
// daemon.UsageError naming the setting.
func parse(args []string, out io.Writer) (*settings, error) {
	s := &settings{}
	p := &s.pub
	fs := flag.NewFlagSet("publisher", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.dbPath, "db", "", "`path` of the application's SQLite outbox database (required); the lock file is <path>.lock")
	s.nats.RegisterFlags(fs)
	fs.StringVar(&s.httpAddr, "http", "127.0.0.1:9101", "`address` of /metrics, /healthz and /readyz")
	fs.IntVar(&p.BatchSize, "batch-size", publisher.DefaultBatchSize, "most rows read from the outbox in one query")
	fs.IntVar(&p.MaxInFlight, "max-in-flight", publisher.DefaultMaxInFlight, "most rows published and not yet acknowledged by JetStream")
	fs.DurationVar(&p.PollInterval, "poll-interval", publisher.DefaultPollInterval, "how often an idle publisher checks the database for another process's commit (PRAGMA data_version)")
	fs.DurationVar(&p.FallbackInterval, "fallback-interval", publisher.DefaultFallbackInterval, "slow tick that reads the outbox even when no commit was noticed")
	fs.DurationVar(&p.AckTimeout, "ack-timeout", publisher.DefaultAckTimeout, "how long a PubAck may take before the publish counts as failed and is retried")
	fs.DurationVar(&p.RetryInitial, "retry-initial", publisher.DefaultRetryInitial, "first delay after a failure (NATS down, publish error); doubles with jitter")
	fs.DurationVar(&p.RetryMax, "retry-max", publisher.DefaultRetryMax, "largest delay between retries")
	fs.DurationVar(&p.LockPollInterval, "lock-poll-interval", publisher.DefaultLockPollInterval, "how often a standby tries to take the lock of the database")
	fs.DurationVar(&p.PurgeRetention, "purge-retention", publisher.DefaultPurgeRetention, "how long published rows stay in the outbox before they are deleted (keep it longer than the application's retry horizon)")
	fs.DurationVar(&p.PurgeInterval, "purge-interval", publisher.DefaultPurgeInterval, "how often published rows older than -purge-retention are deleted")
	fs.IntVar(&p.PurgeChunk, "purge-chunk", publisher.DefaultPurgeChunk, "most rows deleted in one transaction")
	fs.DurationVar(&p.CheckpointInterval, "checkpoint-interval", publisher.DefaultCheckpointInterval, "how often the WAL is copied into the database (PASSIVE checkpoint, never waits)")
	fs.DurationVar(&p.TruncateInterval, "truncate-interval", publisher.DefaultTruncateInterval, "how often the -wal file is truncated (TRUNCATE checkpoint; waits at most 200ms for readers, PASSIVE when they are in the way)")
	fs.DurationVar(&p.BacklogInterval, "backlog-interval", publisher.DefaultBacklogInterval, "how often the backlog metrics are refreshed (less often while the count is expensive)")
	fs.DurationVar(&p.ShutdownTimeout, "shutdown-timeout", publisher.DefaultShutdownTimeout, "on SIGTERM, how long to wait for in-flight PubAcks and the final marking")
	fs.DurationVar(&p.DB.BusyTimeout, "db-busy-timeout", 10*time.Second, "how long an SQLite statement waits for another writer's lock")
	fs.IntVar(&p.Streams.Replicas, "replicas", 1, "replicas of NOTIFY and NOTIFY_DEAD (3 on a cluster)")
	fs.DurationVar(&p.Streams.Duplicates, "duplicate-window", jetstream.DefaultDuplicates, "NOTIFY de-duplication window: covers a publisher restart or takeover")
	fs.DurationVar(&p.Streams.MaxAge, "max-age", jetstream.DefaultMaxAge, "how long NOTIFY keeps messages (at least -duplicate-window)")
	fs.DurationVar(&p.Streams.DeadMaxAge, "dead-max-age", jetstream.DefaultDeadMaxAge, "how long NOTIFY_DEAD keeps dead letters")
	s.log.Register(fs)
	fs.BoolVar(&s.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: publisher -db PATH [flags]

Drains the outbox table of an SQLite database into the NATS JetStream stream
NOTIFY, creating or updating the streams first. Every flag can also be set as
PUBLISHER_<FLAG> (upper case, dashes as underscores, e.g. PUBLISHER_BATCH_SIZE)
or in the -config YAML file (keys are flag names); an explicit flag wins over
the environment, which wins over the file. -nats defaults to $NATS_URL.

`)
		fs.PrintDefaults()
	}
	if err := daemon.Parse(fs, args, "PUBLISHER"); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, daemon.UsageError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if s.showVersion {
		return s, nil
	}
	if s.dbPath == "" {
		return nil, daemon.UsageError{Err: errors.New("-db: the outbox database path is required")}
	}
	if p.DB.BusyTimeout <= 0 {
		return nil, daemon.UsageError{Err: fmt.Errorf("-db-busy-timeout: %v must be positive", p.DB.BusyTimeout)}
	}
	if err := p.Validate(); err != nil {
		return nil, daemon.UsageError{Err: errors.New(flagNames.Replace(err.Error()))}
	}
	if err := s.nats.Validate(); err != nil {
		return nil, daemon.UsageError{Err: err}
	}
	return s, nil
}

// flagNames rewrites the field names in option errors as the flags that set
// them. Longer names come first where one contains another.
var flagNames = strings.NewReplacer(
	"BatchSize", "-batch-size", "MaxInFlight", "-max-in-flight", "PollInterval", "-poll-interval",
	"FallbackInterval", "-fallback-interval", "AckTimeout", "-ack-timeout",
	"RetryInitial", "-retry-initial", "RetryMax", "-retry-max", "LockPollInterval", "-lock-poll-interval",
	"PurgeRetention", "-purge-retention", "PurgeInterval", "-purge-interval", "PurgeChunk", "-purge-chunk",
	"CheckpointInterval", "-checkpoint-interval", "TruncateInterval", "-truncate-interval", "BacklogInterval", "-backlog-interval",
	"ShutdownTimeout", "-shutdown-timeout", "Replicas", "-replicas", "Duplicates", "-duplicate-window",
	"DeadMaxAge", "-dead-max-age", "MaxAge", "-max-age",
)

func runMain(ctx context.Context, args []string, stderr io.Writer) error {
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
	log = log.With("daemon", "publisher")
	ln, err := daemon.Listen("http", s.httpAddr)
	if err != nil {
		return err
	}
	defer ln.Close()

	s.nats.Name = "publisher"
	nc, err := jetstream.Connect(ctx, s.nats, log)
	if err != nil {
		return daemon.UsageError{Err: err}
	}
	defer nc.Close()
	reg := daemon.NewRegistry()
	s.pub.Logger = log
	s.pub.Registerer = reg
	pub, err := publisher.Open(ctx, s.dbPath, nc, s.pub)
	if err != nil {
		return fmt.Errorf("-db %s: %w", s.dbPath, err)
	}
	defer pub.Close()

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g.Add(func() error { return pub.Run(runCtx) }, func(error) { stop() })
	daemon.AddHTTP(&g, ln, daemon.Endpoints{
		Registry: reg,
		Ready: func() error {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return pub.Ready(rctx)
		},
	}.Handler(), log)
	log.Info("publisher starting", "version", version, "db", s.dbPath,
		"nats", jetstream.RedactURL(s.nats.ServerURLs()), "batch_size", s.pub.BatchSize, "max_in_flight", s.pub.MaxInFlight)
	err = g.Run()
	switch {
	case daemon.SignalStopped(err):
		log.Info("publisher stopped", "reason", err.Error())
		return nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		log.Info("publisher stopped")
		return nil
	}
	return err
}
