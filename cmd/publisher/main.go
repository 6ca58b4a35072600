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
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
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

// defaultHTTP is the publisher's default address of its HTTP endpoints.
const defaultHTTP = "127.0.0.1:9101"

// settings are everything the flags configure.
type settings struct {
	dbPath      string
	nats        jetstream.Options
	http        daemon.HTTPFlags
	pub         publisher.Options
	jetstream   daemon.JetStreamFlags
	log         daemon.LogFlags
	showVersion bool
	// gatherLeaders keeps every group's leader on NOTIFY's node
	// (jetstream.LeaderGatherer).
	gatherLeaders bool
	// atomicBatches is the inverse of pub.NoAtomicBatches.
	atomicBatches bool
	// config is where each setting came from, for the start-up log.
	config *config.Set
}

const usage = `Usage: publisher -db PATH [flags]

Drains the outbox table of an SQLite database into the NATS JetStream stream
NOTIFY. At start it creates NOTIFY and NOTIFY_DEAD if they are missing, as the
-jetstream-config declaration says, and reports where the live streams differ
from it; it never changes them (tgnotify provision does).

Every flag can also be set as PUBLISHER_<FLAG> (upper case, dashes as
underscores, e.g. PUBLISHER_BATCH_SIZE) or in the -config YAML file (keys are
flag names); an explicit flag wins over the environment, which wins over the
file. $NATS_URL sets -nats too.

`

// parse reads flags, $PUBLISHER_* and the -config file. Every mistake is an
// error matching config.ErrInvalid that names the flag.
func parse(args []string, out io.Writer) (*settings, error) {
	s := &settings{}
	p := &s.pub
	cs := config.New("publisher", config.Options{EnvPrefix: "PUBLISHER", ConfigFlag: "config", Output: out, Usage: usage})
	s.config = cs
	config.String(cs, &s.dbPath, "db", "", "`path` of the application's SQLite outbox database (required); the lock file is <path>.lock").
		Check(func(v string) error {
			if v == "" && !s.showVersion {
				return errors.New("the outbox database path is required")
			}
			return nil
		})
	daemon.NATSFlags(cs, &s.nats)
	s.http.Register(cs, defaultHTTP, "`address` of /metrics, /healthz and /readyz")
	batch := config.Int(cs, &p.BatchSize, "batch-size", publisher.DefaultBatchSize, "most rows read from the outbox in one query").
		Check(config.Positive)
	config.Int(cs, &p.MaxInFlight, "max-in-flight", publisher.DefaultMaxInFlight, "most rows published and not yet acknowledged by JetStream").
		Check(config.Positive, config.AtLeastFlag(batch))
	poll := config.Duration(cs, &p.PollInterval, "poll-interval", publisher.DefaultPollInterval, "how often an idle publisher checks the database for another process's commit (PRAGMA data_version)").
		Check(config.Positive)
	config.Duration(cs, &p.FallbackInterval, "fallback-interval", publisher.DefaultFallbackInterval, "slow tick that reads the outbox even when no commit was noticed").
		Check(config.Positive, config.AtLeastFlag(poll))
	config.Duration(cs, &p.AckTimeout, "ack-timeout", publisher.DefaultAckTimeout, "how long an acknowledgement (flow ack or PubAck) may take before the publish counts as failed and is retried").
		Check(config.Positive)
	retry := config.Duration(cs, &p.RetryInitial, "retry-initial", publisher.DefaultRetryInitial, "first delay after a failure (NATS down, publish error); doubles with jitter").
		Check(config.Positive)
	config.Duration(cs, &p.RetryMax, "retry-max", publisher.DefaultRetryMax, "largest delay between retries").
		Check(config.Positive, config.AtLeastFlag(retry))
	config.Duration(cs, &p.LockPollInterval, "lock-poll-interval", publisher.DefaultLockPollInterval, "how often a standby tries to take the lock of the database").
		Check(config.Positive)
	config.Duration(cs, &p.PurgeRetention, "purge-retention", publisher.DefaultPurgeRetention, "how long published rows stay in the outbox before they are deleted (keep it longer than the application's retry horizon)").
		Check(config.Positive)
	config.Duration(cs, &p.PurgeInterval, "purge-interval", publisher.DefaultPurgeInterval, "how often published rows older than -purge-retention are deleted").
		Check(config.Positive)
	config.Int(cs, &p.PurgeChunk, "purge-chunk", publisher.DefaultPurgeChunk, "most rows deleted in one transaction").
		Check(config.Positive)
	config.Duration(cs, &p.CancelInterval, "cancel-interval", publisher.DefaultCancelInterval, "how often rows the application cancelled after they were published are carried to the workers as cancel marks").
		Check(config.Positive)
	config.Duration(cs, &p.CheckpointInterval, "checkpoint-interval", publisher.DefaultCheckpointInterval, "how often the WAL is copied into the database (PASSIVE checkpoint, never waits)").
		Check(config.Positive)
	config.Duration(cs, &p.TruncateInterval, "truncate-interval", publisher.DefaultTruncateInterval, "how often the -wal file is truncated (TRUNCATE checkpoint; waits at most 200ms for readers, PASSIVE when they are in the way)").
		Check(config.Positive)
	config.Duration(cs, &p.BacklogInterval, "backlog-interval", publisher.DefaultBacklogInterval, "how often the backlog metrics are refreshed (less often while the count is expensive)").
		Check(config.Positive)
	config.Duration(cs, &p.ShutdownTimeout, "shutdown-timeout", publisher.DefaultShutdownTimeout, "on SIGTERM, how long to wait for in-flight PubAcks and the final marking").
		Check(config.Positive)
	config.Duration(cs, &p.DB.BusyTimeout, "db-busy-timeout", outbox.DefaultBusyTimeout, "how long an SQLite statement waits for another writer's lock").
		Check(config.Positive)
	config.Bool(cs, &s.atomicBatches, "atomic-batches", true, "publish runs of new rows as atomic batches when NOTIFY has one replica: with sync_interval: always the server fsyncs such a batch once, a fast-ingest batch once per message (docs/PUBLISHER.md)")
	config.Bool(cs, &s.gatherLeaders, "gather-leaders", false, "on a cluster, keep the leaders of NOTIFY_DEAD, the buckets and the channels' consumers on the node that leads NOTIFY (step-downs with a preferred server), so that losing another node costs no election (docs/RUNBOOK.md)")
	s.jetstream.Register(cs, jetstream.FlagReplicas, jetstream.FlagDuplicates, jetstream.FlagMaxAge, jetstream.FlagDeadMaxAge)
	s.log.Register(cs)
	config.Bool(cs, &s.showVersion, "version", false, "print the version and exit")
	if err := cs.Parse(args); err != nil {
		return nil, err
	}
	if s.showVersion {
		return s, nil
	}
	p.NoAtomicBatches = !s.atomicBatches
	// Every rule of Validate is declared on a flag above; this only
	// catches one that was not.
	if err := p.Validate(); err != nil {
		return nil, &config.Error{Err: err}
	}
	return s, nil
}

func runMain(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if s.showVersion {
		fmt.Fprintln(stderr, daemon.Version(version))
		return nil
	}
	log, err := s.log.Logger(stderr)
	if err != nil {
		return err
	}
	log = log.With("daemon", "publisher")
	log.Info("configuration", s.config.LogAttr())
	ln, err := daemon.Listen("http", s.http.Addr)
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
	reg := daemon.NewRegistry(daemon.BuildInfo("publisher", daemon.Version(version)))
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	objects, err := daemon.NewObjects(jetstream.Declare(s.jetstream.Settings).ForPublisher(), s.jetstream, log, reg)
	if err != nil {
		return err
	}
	// The lookups are hedged: one lost in an election is sent again
	// instead of holding the first publish back until its attempt's bound.
	lookups := daemon.Hedged(js)
	s.pub.Prepare = func(ctx context.Context) error { return objects.Prepare(ctx, lookups) }
	s.pub.Logger = log
	s.pub.Names = s.jetstream.Settings.Names()
	s.pub.Registerer = reg
	pub, err := publisher.Open(ctx, s.dbPath, nc, s.pub)
	if err != nil {
		return fmt.Errorf("-db %s: %w", s.dbPath, err)
	}
	defer pub.Close()

	var g run.Group
	g.Add(daemon.SignalHandler(ctx))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g.Add(func() error { return pub.Run(runCtx) }, func(error) { stop() })
	if s.gatherLeaders {
		gatherer, err := jetstream.NewLeaderGatherer(nc, jetstream.GatherOptions{
			Anchor:     s.jetstream.Settings.Names().Stream,
			Groups:     jetstream.GatherGroups(jetstream.Declare(s.jetstream.Settings)),
			Active:     pub.IsLeader,
			Logger:     log,
			Registerer: reg,
		})
		if err != nil {
			return err
		}
		g.Add(func() error { return gatherer.Run(runCtx) }, func(error) { stop() })
	}
	daemon.AddHTTP(&g, ln, s.http.Endpoints(daemon.Endpoints{
		Registry: reg,
		Ready: func() error {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return pub.Ready(rctx)
		},
	}).Handler(), log, s.http.Options()...)
	log.Info("publisher starting", "version", daemon.Version(version), "pprof", s.http.Pprof, "db", s.dbPath,
		"nats", jetstream.RedactURL(s.nats.ServerURLs()), "batch_size", s.pub.BatchSize, "max_in_flight", s.pub.MaxInFlight, "gather_leaders", s.gatherLeaders, "atomic_batches", s.atomicBatches)
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
