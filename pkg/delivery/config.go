package delivery

import (
	"errors"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Defaults of [Config], declared once: the daemons' flags take them from
// here.
const (
	// DefaultMaxInFlight is the fewest attempts in flight InFlightFor
	// derives, whatever the rate.
	DefaultMaxInFlight = 16
	// MaxDerivedInFlight is the most attempts in flight InFlightFor
	// derives for a worker that writes its claims, records and events in
	// atomic batches (the default): the more attempts wait for their
	// writes, the larger the batches, and the fewer fsyncs and the less of
	// the server's CPU each message costs. Benchmark row 5′ (fsync on every
	// write, limits off) sent 4,490 msg/s with 256 and 5,257 with 512, the
	// server's CPU per message 158 → 128 µs; 1024 gave no more than 512
	// (BENCHMARKS.md, section 5). The HTTP pool per provider host keeps up
	// to twice as many connections (httpgate.DefaultMaxIdleConnsPerHost),
	// so that a number set by hand above it keeps its connections too.
	MaxDerivedInFlight = 512
	// MaxDerivedInFlightSingleWrites is the most InFlightFor derives for
	// a worker that writes every record on its own (SingleRecordWrites):
	// there more attempts make no write cheaper and only cost the worker
	// (row 5: 7,288 msg/s with 256, 6,750 with 512).
	MaxDerivedInFlightSingleWrites = 256
	// InFlightHorizon is the time one attempt may take, answer and records
	// included, while the attempts in flight still keep the channel's rate:
	// the real Bot API answers in 50–100 ms, and on a server that fsyncs
	// every write the send claim and the delivery record add tens of
	// milliseconds more (36 ms an attempt against the benchmark's local
	// emulator, row 5′ with 64 in flight), so 100 ms held a paid broadcast
	// below its rate exactly when the server was slow.
	InFlightHorizon = 200 * time.Millisecond

	DefaultMaxAttempts       = 10
	DefaultBackoffBase       = 2 * time.Second
	DefaultBackoffCap        = 10 * time.Minute
	DefaultBreakerFailures   = 5
	DefaultBreakerOpen       = 30 * time.Second
	DefaultLaneCap           = 100
	DefaultAckWait           = 10 * time.Second
	DefaultPullBatch         = 256
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultHaltProbe         = 30 * time.Second
	DefaultRememberDelivered = 20_000
	DefaultStatsInterval     = 5 * time.Second
	DefaultTakeoverGap       = 10 * time.Second
	// DefaultFallbackTransactional is how long a transactional
	// notification stays on a channel before it moves to the next one of
	// its route (when it has no fallback_after of its own).
	DefaultFallbackTransactional = 2 * time.Minute
	// DefaultFallbackBulk is the same for bulk notifications: never; only a
	// dead recipient, a refusal or exhausted attempts move them on.
	DefaultFallbackBulk = notify.FallbackNever
	// DefaultDeadRetryAfter is how long a recipient stays dead before its
	// next message is sent for real once more: 0, never. A retry is not
	// free on every channel — repeated sends to a hard-bounced address hurt
	// an email sender's reputation — and a Telegram bot whose updates
	// tgnotify may read learns of an unblock at once (the update intake);
	// set it per worker where neither holds.
	DefaultDeadRetryAfter time.Duration = 0

	// Graceful degradation (degrade.go).
	DefaultRequestTimeout    = 10 * time.Second
	DefaultMaxRequestTimeout = 60 * time.Second
	DefaultSlowThreshold     = time.Second
	DefaultMinRateFraction   = 0.1
	DefaultStormThreshold    = 3
	DefaultStormWindow       = time.Minute
	DefaultBacklogThreshold  = 10_000
)

// Config tunes the engine. Zero values take the defaults documented on each
// field; [Config.Validate] names every bad setting. The channel's own
// settings (rates, provider options) belong to the channel.
type Config struct {
	// MaxInFlight bounds concurrent attempts (each a request to the
	// provider with its claim and delivery record). Zero, the default:
	// derived from the channel's rate by [InFlightFor], 16 for Telegram's
	// 30 msg/s and 200 for its paid broadcast at 1000 msg/s.
	MaxInFlight int
	// MaxAttempts is how many transient failures a notification may have
	// before it is dead-lettered as max_attempts. Default 10.
	MaxAttempts int
	// BackoffBase and BackoffCap shape the retry delay after the n-th
	// transient failure: a uniformly random duration in
	// [BackoffBase/10, min(BackoffCap, BackoffBase·2^(n-1))] ("full
	// jitter"). Defaults 2s and 10m.
	BackoffBase, BackoffCap time.Duration
	// BreakerFailures is the run of consecutive transient failures that
	// opens the circuit breaker. Default 5.
	BreakerFailures uint32
	// BreakerOpen is how long the breaker stays open before a half-open
	// probe. Default 30s.
	BreakerOpen time.Duration
	// LaneCap bounds the messages of one recipient held in memory; more go
	// back to the stream behind them, so a hot recipient cannot fill
	// MaxAckPending and starve the others. Default 100.
	LaneCap int
	// AckWait must equal the consumer's ack wait: held messages are kept
	// alive with InProgress every AckWait/3. Zero means the consumer's, as
	// the server reports it (default 30s if that is unknown).
	AckWait time.Duration
	// PullBatch is how many messages a pull asks for. Default 256.
	PullBatch int
	// ShutdownTimeout bounds how long a stop waits for requests in flight.
	// Default 10s.
	ShutdownTimeout time.Duration
	// HaltProbe is how often a worker halted by rejected credentials checks
	// them again (Channel.Probe). Default 30s.
	HaltProbe time.Duration
	// RememberDelivered is how many recently delivered keys are kept in
	// memory besides notify_delivered. Default 20000: twice the default
	// MaxAckPending. The set covers the keys whose record may not be stored
	// yet; a redelivery of one it has forgotten finds the record in
	// notify_delivered, and one it remembers reads it there too
	// (deliveredHere), so a longer memory saves no reads.
	RememberDelivered int
	// StatsInterval is how often queue depth and dead-letter count are read
	// from JetStream. Default 5s.
	StatsInterval time.Duration
	// TakeoverGap: a message arriving after this long without any (a
	// start, or a takeover from another worker) makes the worker check
	// whether another worker still holds messages, and wait for them (see
	// takeover.go). Default 10s, the default pinned TTL.
	TakeoverGap time.Duration
	// FallbackTransactional and FallbackBulk are how long a notification
	// of each priority stays on a channel, when it does not say
	// (fallback_after), before it moves to the next channel of its route.
	// notify.FallbackNever: only a dead recipient, a refusal or exhausted
	// attempts move it on. Defaults 2m and never.
	FallbackTransactional, FallbackBulk time.Duration
	// DeadRetryAfter is how long after a recipient was found dead (its
	// mark's At) the next message to it is sent for real once more: a
	// success revives it (and publishes notify.events.recipient_revived),
	// another dead answer keeps it dead from then on, for another period.
	// Zero: never; only an operator (tgnotify chat revive) or news from the
	// provider (Worker.ChangeRecipient) revives it. Default 0.
	DeadRetryAfter time.Duration

	// RequestTimeout bounds one request to the provider while answers are
	// fast. Default 10s.
	RequestTimeout time.Duration
	// When the 90th percentile of answer times exceeds SlowThreshold, the
	// send rate halves, down to MinRateFraction of the channel's, and the
	// request timeout doubles, up to MaxRequestTimeout; both come back when
	// answers are fast again. Defaults 1s, 0.1 and 60s.
	SlowThreshold     time.Duration
	MinRateFraction   float64
	MaxRequestTimeout time.Duration
	// StormThreshold 429s within StormWindow, or more than
	// BacklogThreshold messages of the channel waiting (0: no backlog
	// rule), make bulk notifications wait while transactional ones go.
	// Defaults 3, 1m and 10000.
	StormThreshold   int
	StormWindow      time.Duration
	BacklogThreshold int

	// SingleRecordWrites writes every delivery record, send claim and
	// event on its own, never in atomic batches (records.go, events.go).
	// Batches are for a nats-server with sync_interval: always, where a
	// batch's one fsync replaces one per write; on a server that fsyncs on
	// its own schedule the staging store the server makes for each batch
	// costs more than it saves. Default false: batches when notify_delivered
	// (records and claims) and NOTIFY (events) take them.
	SingleRecordWrites bool

	// StrictRate keeps the sends of every second within the channel's
	// rate, even those that make good a stall (a slow JetStream round trip,
	// a busy machine, the publisher behind for a moment). By default a
	// second may hold up to a quarter more than the rate, and only while
	// the channel's bucket has the tokens a stall left (half a second of
	// the rate): over any span the sends stay within the rate and that
	// half second. With StrictRate, while notifications come at the rate
	// (a paid broadcast at 1000 a second) the delay a stall made comes
	// back every second for as long as the rate lasts (botbucket.go;
	// BENCHMARKS.md, section 8). Default false.
	StrictRate bool

	// PauseFile, when set, is a file on the worker's host where it keeps
	// the 429 pauses it announces, besides notify_chats, and from which it
	// reads the last one at start (pausefile.go): a worker restarted in
	// place after a kill then knows a pause the bucket could not store
	// before the kill. One file per worker process; its directory must
	// exist. Default empty: no file.
	PauseFile string
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		MaxAttempts:       DefaultMaxAttempts,
		BackoffBase:       DefaultBackoffBase,
		BackoffCap:        DefaultBackoffCap,
		BreakerFailures:   DefaultBreakerFailures,
		BreakerOpen:       DefaultBreakerOpen,
		LaneCap:           DefaultLaneCap,
		PullBatch:         DefaultPullBatch,
		ShutdownTimeout:   DefaultShutdownTimeout,
		HaltProbe:         DefaultHaltProbe,
		RememberDelivered: DefaultRememberDelivered,
		StatsInterval:     DefaultStatsInterval,
		TakeoverGap:       DefaultTakeoverGap,

		FallbackTransactional: DefaultFallbackTransactional,
		FallbackBulk:          DefaultFallbackBulk,
		DeadRetryAfter:        DefaultDeadRetryAfter,

		RequestTimeout:    DefaultRequestTimeout,
		MaxRequestTimeout: DefaultMaxRequestTimeout,
		SlowThreshold:     DefaultSlowThreshold,
		MinRateFraction:   DefaultMinRateFraction,
		StormThreshold:    DefaultStormThreshold,
		StormWindow:       DefaultStormWindow,
		BacklogThreshold:  DefaultBacklogThreshold,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	fill := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fillInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fillInt(&c.MaxAttempts, d.MaxAttempts)
	fill(&c.BackoffBase, d.BackoffBase)
	fill(&c.BackoffCap, d.BackoffCap)
	if c.BreakerFailures == 0 {
		c.BreakerFailures = d.BreakerFailures
	}
	fill(&c.BreakerOpen, d.BreakerOpen)
	fillInt(&c.LaneCap, d.LaneCap)
	fillInt(&c.PullBatch, d.PullBatch)
	fill(&c.ShutdownTimeout, d.ShutdownTimeout)
	fill(&c.HaltProbe, d.HaltProbe)
	fillInt(&c.RememberDelivered, d.RememberDelivered)
	fill(&c.StatsInterval, d.StatsInterval)
	fill(&c.TakeoverGap, d.TakeoverGap)
	fill(&c.FallbackTransactional, d.FallbackTransactional)
	fill(&c.FallbackBulk, d.FallbackBulk)
	fill(&c.RequestTimeout, d.RequestTimeout)
	fill(&c.MaxRequestTimeout, max(d.MaxRequestTimeout, c.RequestTimeout))
	fill(&c.SlowThreshold, d.SlowThreshold)
	if c.MinRateFraction == 0 {
		c.MinRateFraction = d.MinRateFraction
	}
	fillInt(&c.StormThreshold, d.StormThreshold)
	fill(&c.StormWindow, d.StormWindow)
	fillInt(&c.BacklogThreshold, d.BacklogThreshold)
	return c
}

// FieldError names an invalid setting by its Config field.
type FieldError struct {
	// Field is the Config field, such as "BackoffCap".
	Field string
	// Value is the setting's value.
	Value any
	// Problem says what is wrong, possibly naming another field in braces
	// ({BackoffBase}) so that a caller can put its own name in.
	Problem string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %v: %s", e.Field, e.Value, e.Problem) }

// Validate reports every invalid setting after defaults are applied, each
// a [*FieldError].
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, field string, v any, problem string) {
		if !ok {
			errs = append(errs, &FieldError{Field: field, Value: v, Problem: problem})
		}
	}
	check(c.MaxInFlight >= 0, "MaxInFlight", c.MaxInFlight, "must not be negative (0: derived from the channel's rate)")
	check(c.MaxAttempts >= 1, "MaxAttempts", c.MaxAttempts, "must be at least 1")
	check(c.BackoffBase > 0, "BackoffBase", c.BackoffBase, "must be positive")
	check(c.BackoffCap >= c.BackoffBase, "BackoffCap", c.BackoffCap, fmt.Sprintf("must be at least {BackoffBase} (%v)", c.BackoffBase))
	check(c.BreakerOpen > 0, "BreakerOpen", c.BreakerOpen, "must be positive")
	check(c.LaneCap >= 1, "LaneCap", c.LaneCap, "must be at least 1")
	check(c.AckWait == 0 || c.AckWait >= time.Second, "AckWait", c.AckWait, "must be at least 1s")
	check(c.PullBatch >= 1, "PullBatch", c.PullBatch, "must be at least 1")
	check(c.ShutdownTimeout > 0, "ShutdownTimeout", c.ShutdownTimeout, "must be positive")
	check(c.HaltProbe > 0, "HaltProbe", c.HaltProbe, "must be positive")
	check(c.RememberDelivered >= 0, "RememberDelivered", c.RememberDelivered, "must not be negative")
	check(c.StatsInterval > 0, "StatsInterval", c.StatsInterval, "must be positive")
	check(c.TakeoverGap > 0, "TakeoverGap", c.TakeoverGap, "must be positive")
	check(c.FallbackTransactional > 0 || c.FallbackTransactional == notify.FallbackNever, "FallbackTransactional", c.FallbackTransactional, "must be positive, or never")
	check(c.FallbackBulk > 0 || c.FallbackBulk == notify.FallbackNever, "FallbackBulk", c.FallbackBulk, "must be positive, or never")
	check(c.DeadRetryAfter >= 0, "DeadRetryAfter", c.DeadRetryAfter, "must not be negative (0: never)")
	check(c.RequestTimeout > 0, "RequestTimeout", c.RequestTimeout, "must be positive")
	check(c.MaxRequestTimeout >= c.RequestTimeout, "MaxRequestTimeout", c.MaxRequestTimeout, fmt.Sprintf("must be at least {RequestTimeout} (%v)", c.RequestTimeout))
	check(c.SlowThreshold > 0, "SlowThreshold", c.SlowThreshold, "must be positive")
	check(c.MinRateFraction > 0 && c.MinRateFraction <= 1, "MinRateFraction", c.MinRateFraction, "must be in (0, 1]")
	check(c.StormThreshold >= 1, "StormThreshold", c.StormThreshold, "must be at least 1")
	check(c.StormWindow > 0, "StormWindow", c.StormWindow, "must be positive")
	check(c.BacklogThreshold >= 0, "BacklogThreshold", c.BacklogThreshold, "must not be negative (0 turns the rule off)")
	return errors.Join(errs...)
}

// InFlightFor is the number of attempts in flight that keeps a channel's
// rate r while each takes up to InFlightHorizon (Little's law: rate ×
// time), between DefaultMaxInFlight and MaxDerivedInFlight, or
// MaxDerivedInFlightSingleWrites for a worker whose Config has
// SingleRecordWrites. A fixed 16 capped Telegram's paid broadcast (1000
// msg/s) at 16 attempts per answer time: 460 msg/s end to end on the
// benchmark's emulator (row 8a), about 160 msg/s against an API that
// answers in 100 ms.
func InFlightFor(r rate.Limit, singleRecordWrites bool) int {
	most := MaxDerivedInFlight
	if singleRecordWrites {
		most = MaxDerivedInFlightSingleWrites
	}
	if r <= 0 {
		return DefaultMaxInFlight
	}
	n := math.Ceil(float64(r) * InFlightHorizon.Seconds())
	if n >= float64(most) { // rate.Inf too
		return most
	}
	return max(int(n), DefaultMaxInFlight)
}
