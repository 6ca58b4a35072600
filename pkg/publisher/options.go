package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// Defaults of [Options].
const (
	DefaultBatchSize          = 1024
	DefaultMaxInFlight        = 8192
	DefaultPollInterval       = time.Millisecond
	DefaultFallbackInterval   = time.Second
	DefaultAckTimeout         = 10 * time.Second
	DefaultShutdownTimeout    = 10 * time.Second
	DefaultRetryInitial       = 100 * time.Millisecond
	DefaultRetryMax           = 5 * time.Second
	DefaultLockPollInterval   = 500 * time.Millisecond
	DefaultPurgeRetention     = 72 * time.Hour
	DefaultPurgeInterval      = time.Minute
	DefaultPurgeChunk         = 1000
	DefaultCheckpointInterval = 250 * time.Millisecond
	DefaultTruncateInterval   = 10 * time.Second
	DefaultBacklogInterval    = 2 * time.Second
	DefaultCancelInterval     = time.Second
)

// checkpointBusyTimeout bounds how long a TRUNCATE checkpoint waits for
// readers. While it waits it holds off new writers, so it must be short: the
// application's writes would stall otherwise.
const checkpointBusyTimeout = 200 * time.Millisecond

// Options configure a [Publisher]. Zero values take the defaults.
type Options struct {
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the metrics (prefix tgnotify_publisher_). Nil
	// means the metrics are kept but not registered.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Names are the names of the streams and subjects to publish to
	// (jetstream.NewNames of the declaration's subject prefix). Default
	// jetstream.DefaultNames(): stream NOTIFY, subjects
	// notify.<channel>.<recipient>.
	Names jetstream.Names

	// BatchSize is the most rows read in one query. Default 1024.
	BatchSize int
	// MaxInFlight bounds rows published and not yet acknowledged (rounded
	// to whole batches). Default 8192.
	MaxInFlight int
	// PollInterval is how often an idle publisher polls PRAGMA data_version
	// for another connection's commit. Default 1ms.
	PollInterval time.Duration
	// FallbackInterval is the slow tick that reads the outbox even when no
	// commit was noticed. Default 1s.
	FallbackInterval time.Duration
	// AckTimeout is how long an acknowledgement may take (a flow ack or the
	// final PubAck of a fast-ingest batch, a PubAck when publishing message
	// by message) before the publish counts as failed and the round
	// restarts. Default 10s.
	AckTimeout time.Duration
	// ShutdownTimeout bounds how long Run, once its context is cancelled,
	// waits for in-flight PubAcks and the final marking. Default 10s.
	ShutdownTimeout time.Duration
	// RetryInitial and RetryMax bound the backoff between failed rounds
	// (exponential, with jitter). Defaults 100ms and 5s.
	RetryInitial, RetryMax time.Duration
	// LockPollInterval is how often a standby tries to take the lock.
	// Default 500ms.
	LockPollInterval time.Duration
	// PurgeRetention is how long published rows are kept before they are
	// deleted. Keep it longer than any retry horizon of the application:
	// once a row is purged, enqueueing its key again writes a new row.
	// Default 72h.
	PurgeRetention time.Duration
	// PurgeInterval is how often published rows are purged. Default 1m.
	PurgeInterval time.Duration
	// PurgeChunk is the most rows deleted per transaction. Default 1000.
	PurgeChunk int
	// CancelInterval is how often cancelled rows of the published prefix
	// are carried to the workers as cancel marks. Default 1s.
	CancelInterval time.Duration
	// CheckpointInterval is how often the WAL is copied into the database
	// (a PASSIVE checkpoint, which never waits). Default 250ms.
	CheckpointInterval time.Duration
	// TruncateInterval is how often the -wal file is truncated (a TRUNCATE
	// checkpoint, which waits up to 200ms for readers). Default 10s.
	TruncateInterval time.Duration
	// BacklogInterval is how often the backlog metrics are refreshed.
	// Default 2s.
	BacklogInterval time.Duration
	// Prepare makes sure the streams exist before the first publish, and
	// again after NOTIFY stopped answering (deleted, say). An error that is
	// a *jetstream.ConflictError stops Run; any other is retried with
	// backoff. Default: create the streams of Names as
	// jetstream.DefaultSettings() declares them where they are missing,
	// changing nothing that exists (jetstream.Ensure). The daemon passes
	// its declaration, reports drift, and may only wait (-provision=false).
	Prepare func(ctx context.Context) error
	// NoAtomicBatches keeps the publisher from publishing fresh rows in
	// atomic batches, which it does by default on a NOTIFY with one
	// replica (docs/PUBLISHER.md, "Atomic batches for fresh rows").
	NoAtomicBatches bool
	// DB tunes the outbox database handle.
	DB outbox.Options

	// AfterAck, when set, is called with rows whose PubAcks arrived, before
	// they are marked published (their Payload is nil: it is released once
	// published). Successive calls carry consecutive rows in id order; one
	// marking may follow several calls. An error makes Run return it at once,
	// without marking those rows: tests use it to simulate a crash between
	// PubAck and marking. Production code leaves it nil.
	AfterAck func(rows []outbox.Row) error
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Names = o.Names.OrDefault()
	setDefault(&o.BatchSize, DefaultBatchSize)
	setDefault(&o.MaxInFlight, DefaultMaxInFlight)
	setDefault(&o.PollInterval, DefaultPollInterval)
	setDefault(&o.FallbackInterval, DefaultFallbackInterval)
	setDefault(&o.AckTimeout, DefaultAckTimeout)
	setDefault(&o.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&o.RetryInitial, DefaultRetryInitial)
	setDefault(&o.RetryMax, DefaultRetryMax)
	setDefault(&o.LockPollInterval, DefaultLockPollInterval)
	setDefault(&o.PurgeRetention, DefaultPurgeRetention)
	setDefault(&o.PurgeInterval, DefaultPurgeInterval)
	setDefault(&o.PurgeChunk, DefaultPurgeChunk)
	setDefault(&o.CancelInterval, DefaultCancelInterval)
	setDefault(&o.CheckpointInterval, DefaultCheckpointInterval)
	setDefault(&o.TruncateInterval, DefaultTruncateInterval)
	setDefault(&o.BacklogInterval, DefaultBacklogInterval)
	return o
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate checks the options after defaults are applied. The error names
// every invalid field.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	positive := func(name string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d must be positive", name, v))
		}
	}
	positive("BatchSize", int64(o.BatchSize))
	positive("MaxInFlight", int64(o.MaxInFlight))
	positive("PurgeChunk", int64(o.PurgeChunk))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", o.PollInterval},
		{"FallbackInterval", o.FallbackInterval},
		{"AckTimeout", o.AckTimeout},
		{"ShutdownTimeout", o.ShutdownTimeout},
		{"RetryInitial", o.RetryInitial},
		{"RetryMax", o.RetryMax},
		{"LockPollInterval", o.LockPollInterval},
		{"PurgeRetention", o.PurgeRetention},
		{"PurgeInterval", o.PurgeInterval},
		{"CancelInterval", o.CancelInterval},
		{"CheckpointInterval", o.CheckpointInterval},
		{"TruncateInterval", o.TruncateInterval},
		{"BacklogInterval", o.BacklogInterval},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v must be positive", d.name, d.v))
		}
	}
	if o.BatchSize > 0 && o.MaxInFlight > 0 && o.MaxInFlight < o.BatchSize {
		errs = append(errs, fmt.Errorf("MaxInFlight: %d must be at least BatchSize %d", o.MaxInFlight, o.BatchSize))
	}
	if o.RetryMax > 0 && o.RetryMax < o.RetryInitial {
		errs = append(errs, fmt.Errorf("RetryMax: %v must be at least RetryInitial %v", o.RetryMax, o.RetryInitial))
	}
	if o.PollInterval > 0 && o.FallbackInterval > 0 && o.FallbackInterval < o.PollInterval {
		errs = append(errs, fmt.Errorf("FallbackInterval: %v must be at least PollInterval %v", o.FallbackInterval, o.PollInterval))
	}
	return errors.Join(errs...)
}

// inFlightBatches is the capacity, in batches, of the channel between the
// publish and ack stages. With one batch being published and one being
// awaited, the rows in flight stay within MaxInFlight.
func (o Options) inFlightBatches() int {
	return max(1, o.MaxInFlight/o.BatchSize-1)
}

// markQueue is the capacity, in rows, of the queue between the ack and mark
// stages (ackedQueue). Marking commits with an fsync and waits for the
// application's write lock, which now and then takes tens or hundreds of
// milliseconds (a busy disk, SQLite's busy handler sleeping between tries);
// the queue absorbs such a stall without throttling publishing, and the
// mark stage then marks everything queued in one transaction. Acknowledged
// rows (their payloads already released) wait here, at most 4 x MaxInFlight
// of them.
func (o Options) markQueue() int {
	return 4 * max(1, o.MaxInFlight)
}
