package delivery

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes the worker. Zero values take the defaults documented on each
// field; [Config.Validate] names the first bad setting.
type Config struct {
	// BotRate is the bot-wide send rate, messages per second. Default 30
	// (Telegram's bulk limit), or 1000 with PaidBroadcast.
	BotRate float64
	// PaidBroadcast sends with allow_paid_broadcast, which raises Telegram's
	// bot-wide limit to 1000 msg/s for 0.1 Star per message.
	PaidBroadcast bool
	// ChatRate is the per-private-chat rate, messages per second. Default 1.
	ChatRate float64
	// GroupPerMinute is the per-group rate (chat id < 0). Default 20.
	GroupPerMinute float64
	// MaxInFlight bounds concurrent Bot API requests. Default 16.
	MaxInFlight int
	// MaxAttempts is how many transient failures a notification may have
	// before it is dead-lettered as max_attempts. Default 10.
	MaxAttempts int
	// BackoffBase and BackoffCap shape the retry delay after the n-th
	// transient failure: a uniformly random duration in
	// [0, min(BackoffCap, BackoffBase·2^(n-1))] ("full jitter"). Defaults 2s
	// and 10m.
	BackoffBase, BackoffCap time.Duration
	// BreakerFailures is the run of consecutive transient failures that
	// opens the circuit breaker. Default 5.
	BreakerFailures uint32
	// BreakerOpen is how long the breaker stays open before a half-open
	// probe. Default 30s.
	BreakerOpen time.Duration
	// LaneCap bounds the messages of one chat held in memory; more go back
	// to the stream behind them, so a hot chat cannot fill MaxAckPending and
	// starve the others. Default 100.
	LaneCap int
	// AckWait must equal the consumer's ack wait: held messages are kept
	// alive with InProgress every AckWait/3. Default 30s.
	AckWait time.Duration
	// PullBatch is how many messages a pull asks for. Default 256.
	PullBatch int
	// ShutdownTimeout bounds how long a stop waits for requests in flight.
	// Default 10s.
	ShutdownTimeout time.Duration
	// HaltProbe is how often a worker halted by a rejected token (401)
	// checks the token again with getMe. Default 30s.
	HaltProbe time.Duration
	// RememberDelivered is how many recently delivered keys are kept in
	// memory besides notify_delivered. Default 100000.
	RememberDelivered int
	// StatsInterval is how often queue depth and dead-letter count are read
	// from JetStream. Default 5s.
	StatsInterval time.Duration
	// TakeoverGap: a message arriving after this long without any (a start,
	// or a takeover from another worker) makes the worker check whether
	// another worker still holds messages, and wait for them (see
	// takeover.go). Default 10s, the default pinned TTL.
	TakeoverGap time.Duration
}

func (c Config) withDefaults() Config {
	if c.BotRate == 0 {
		c.BotRate = 30
		if c.PaidBroadcast {
			c.BotRate = 1000
		}
	}
	if c.ChatRate == 0 {
		c.ChatRate = 1
	}
	if c.GroupPerMinute == 0 {
		c.GroupPerMinute = 20
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 2 * time.Second
	}
	if c.BackoffCap == 0 {
		c.BackoffCap = 10 * time.Minute
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = 5
	}
	if c.BreakerOpen == 0 {
		c.BreakerOpen = 30 * time.Second
	}
	if c.LaneCap == 0 {
		c.LaneCap = 100
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.PullBatch == 0 {
		c.PullBatch = 256
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.HaltProbe == 0 {
		c.HaltProbe = 30 * time.Second
	}
	if c.RememberDelivered == 0 {
		c.RememberDelivered = 100_000
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = 5 * time.Second
	}
	if c.TakeoverGap == 0 {
		c.TakeoverGap = 10 * time.Second
	}
	return c
}

// Validate reports every invalid setting after defaults are applied, each
// naming its Config field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.BotRate > 0, "BotRate %v must be positive", c.BotRate)
	check(c.ChatRate > 0, "ChatRate %v must be positive", c.ChatRate)
	check(c.GroupPerMinute > 0, "GroupPerMinute %v must be positive", c.GroupPerMinute)
	check(c.MaxInFlight >= 1, "MaxInFlight %d must be at least 1", c.MaxInFlight)
	check(c.MaxAttempts >= 1, "MaxAttempts %d must be at least 1", c.MaxAttempts)
	check(c.BackoffBase > 0, "BackoffBase %v must be positive", c.BackoffBase)
	check(c.BackoffCap >= c.BackoffBase, "BackoffCap %v must be at least BackoffBase %v", c.BackoffCap, c.BackoffBase)
	check(c.BreakerOpen > 0, "BreakerOpen %v must be positive", c.BreakerOpen)
	check(c.LaneCap >= 1, "LaneCap %d must be at least 1", c.LaneCap)
	check(c.AckWait >= time.Second, "AckWait %v must be at least 1s", c.AckWait)
	check(c.PullBatch >= 1, "PullBatch %d must be at least 1", c.PullBatch)
	check(c.ShutdownTimeout > 0, "ShutdownTimeout %v must be positive", c.ShutdownTimeout)
	check(c.HaltProbe > 0, "HaltProbe %v must be positive", c.HaltProbe)
	check(c.RememberDelivered >= 0, "RememberDelivered %d must not be negative", c.RememberDelivered)
	check(c.StatsInterval > 0, "StatsInterval %v must be positive", c.StatsInterval)
	check(c.TakeoverGap > 0, "TakeoverGap %v must be positive", c.TakeoverGap)
	return errors.Join(errs...)
}
