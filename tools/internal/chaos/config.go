package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Config is one chaos run. [ShortConfig] and [LongConfig] are the presets;
// a zero field is an error, not a default.
type Config struct {
	// Seed derives the fault schedule and the orders.
	Seed int64
	// Name labels the run in its output ("short" or "long").
	Name string
	// Dir holds the run's data and process logs. It is emptied at start if
	// it is empty or an earlier chaos run's (it has a marker file).
	Dir string
	// Bin is the directory with the binaries `make build` produces.
	Bin string
	// NATSConfig is the nats-server configuration the run starts from
	// (configs/nats-server.conf); its addresses and store are replaced.
	NATSConfig string

	// FaultPhase is how long orders are placed while faults are injected.
	FaultPhase time.Duration
	// OrderRate is the orders placed per second during the fault phase.
	OrderRate float64
	// OrdersPerChat is the mean number of orders per private chat, so that
	// every chat's order can be checked.
	OrdersPerChat int
	// RepeatFraction of the orders is posted twice at once, as a client
	// that timed out and retried; LateRepeatFraction is posted again after
	// the fault phase, when its notification is usually delivered.
	RepeatFraction, LateRepeatFraction float64
	// RuntimeBlocks is how many chats block the bot during the run.
	RuntimeBlocks int
	// EmailShare, PhoneShare and MaxShare are the fractions of customers
	// (private chats) with an email address, a phone number and a MAX
	// account besides their Telegram chat: their orders' routes fall back
	// along telegram → max → email → sms.
	EmailShare, PhoneShare, MaxShare float64

	// PublisherKillEvery and WorkerKillEvery are the mean intervals between
	// SIGKILLs of the publisher and of a worker.
	PublisherKillEvery, WorkerKillEvery time.Duration
	// NATSRestartEvery is the mean interval between nats-server restarts.
	NATSRestartEvery time.Duration
	// HardNATSFraction of the nats-server restarts use SIGKILL instead of
	// SIGTERM.
	HardNATSFraction float64
	// TelegramFaultEvery is the mean gap between Telegram faults (an
	// outage or a 429 storm); they do not overlap.
	TelegramFaultEvery time.Duration
	// StandbyOn and StandbyOff are the mean spans with and without the hot
	// standby worker.
	StandbyOn, StandbyOff time.Duration
	// LongOutageFraction of the Telegram outages last longer than
	// Channels.FallbackAfter, so that notifications move to their next
	// channel.
	LongOutageFraction float64
	// ChannelWorkerKillEvery is the mean interval between SIGKILLs of the
	// max, email and sms workers (one of them each time).
	ChannelWorkerKillEvery time.Duration
	// MailpitRestartEvery is the mean interval between stops of Mailpit,
	// the SMTP server (SIGTERM or SIGKILL, down for 1–8 s).
	MailpitRestartEvery time.Duration
	// ProviderFaultEvery is the mean gap between faults of the MAX and
	// SMS emulators (an outage or a 429 pause).
	ProviderFaultEvery time.Duration

	// Cluster runs NATS as three nodes (the files of ClusterConfig, routes
	// and client ports behind proxies that can cut a node off), provisions
	// every stream, consumer and bucket with three replicas and gives every
	// daemon all three URLs. Each nats-server restart then restarts one
	// node, and node kills, leader step-downs and partitions join the
	// faults.
	Cluster bool
	// ClusterConfig is the directory of the node files
	// (configs/nats-cluster).
	ClusterConfig string
	// NodeKillEvery, StepDownEvery and PartitionEvery are the mean
	// intervals between SIGKILLs of a node, leader step-downs and
	// partitions of a node (cluster runs).
	NodeKillEvery, StepDownEvery, PartitionEvery time.Duration

	// Worker are the telegram worker's timers and limits, passed as flags
	// to both worker processes and to the channel workers; the breaker
	// bound is computed from them.
	Worker WorkerSettings
	// Channels are the settings of the fallback channels' workers.
	Channels ChannelSettings

	// DrainTimeout bounds the wait, after the fault phase, for every order
	// to be delivered or dead-lettered.
	DrainTimeout time.Duration
	// ReadyTimeout bounds each process's start.
	ReadyTimeout time.Duration
	// StopTimeout bounds each process's graceful stop.
	StopTimeout time.Duration
	// ProgressEvery is the interval between progress lines.
	ProgressEvery time.Duration
	// WorkerLogLevel is every worker's -log-level (debug, to investigate a
	// run).
	WorkerLogLevel string
}

// WorkerSettings are the worker settings that matter to the faults: shorter
// than production timers, so that more faults fit in a run; the code paths
// are the same. AckWait and PinnedTTL are the consumer's: they go into the
// JetStream declaration both daemons read (-jetstream-config), the others
// are worker flags.
type WorkerSettings struct {
	AckWait         time.Duration // declaration ack-wait (production 30s)
	PinnedTTL       time.Duration // declaration pinned-ttl (production 10s)
	BreakerFailures int           // -breaker-failures
	BreakerOpen     time.Duration // -breaker-open (production 30s)
	MaxInFlight     int           // -max-in-flight
	MaxAttempts     int           // -max-attempts
	BackoffBase     time.Duration // -backoff-base (production 2s)
	BackoffCap      time.Duration // -backoff-cap (production 10m)
	RequestTimeout  time.Duration // -request-timeout (production 10s)
}

// ChannelSettings are what the run sets on every channel worker beyond
// WorkerSettings: a short fallback_after, so that a Telegram outage of a
// few seconds moves notifications on, and rates above the email and SMS
// defaults, so that the fallback channels keep up with the run's orders
// (the code paths are the same).
type ChannelSettings struct {
	FallbackAfter          time.Duration // -fallback-after-transactional of every worker (production 2m)
	EmailRate              float64       // email-worker -rate (production 5)
	EmailPerRecipient      float64       // email-worker -recipient-per-minute (production 12)
	SMSSegmentsPerSecond   float64       // sms-worker and sms-emulator -segments-per-second (production 1)
	SMSRecipientsPerMinute float64       // sms-worker -recipient-per-minute (production 6)
}

// defaultChannels are the channel settings of both presets.
func defaultChannels() ChannelSettings {
	return ChannelSettings{
		FallbackAfter:          12 * time.Second,
		EmailRate:              20,
		EmailPerRecipient:      30,
		SMSSegmentsPerSecond:   10,
		SMSRecipientsPerMinute: 20,
	}
}

// declaration renders the consumer's settings as a JetStream declaration
// file (configs/jetstream.yaml's keys), with replicas for a cluster.
func (w WorkerSettings) declaration(replicas int) string {
	return fmt.Sprintf("ack-wait: %s\npinned-ttl: %s\nreplicas: %d\n", w.AckWait, w.PinnedTTL, replicas)
}

// args renders the other settings as worker flags.
func (w WorkerSettings) args() []string {
	return []string{
		"-breaker-failures", fmt.Sprint(w.BreakerFailures),
		"-breaker-open", w.BreakerOpen.String(),
		"-max-in-flight", fmt.Sprint(w.MaxInFlight),
		"-max-attempts", fmt.Sprint(w.MaxAttempts),
		"-backoff-base", w.BackoffBase.String(),
		"-backoff-cap", w.BackoffCap.String(),
		"-request-timeout", w.RequestTimeout.String(),
	}
}

// defaultWorker are the worker settings of both presets.
func defaultWorker() WorkerSettings {
	return WorkerSettings{
		AckWait:         4 * time.Second,
		PinnedTTL:       2 * time.Second,
		BreakerFailures: 5,
		BreakerOpen:     3 * time.Second,
		MaxInFlight:     16,
		MaxAttempts:     10,
		BackoffBase:     500 * time.Millisecond,
		BackoffCap:      8 * time.Second,
		RequestTimeout:  4 * time.Second,
	}
}

// ShortConfig is the preset CI runs (CHAOS_SHORT=1): about three and a half
// minutes on a two-core machine.
func ShortConfig() Config {
	c := base()
	c.Name = "short"
	c.FaultPhase = 150 * time.Second
	c.RuntimeBlocks = 4
	c.DrainTimeout = 75 * time.Second
	c.ProgressEvery = 15 * time.Second
	return c
}

// LongConfig is the default run: 25 minutes of faults. Orders come a little
// slower than in the short run: under this density of faults the system
// delivers about 11 a second, and a backlog that grows for 25 minutes makes
// every takeover slower (the new worker waits for all the old one held).
func LongConfig() Config {
	c := base()
	c.Name = "long"
	c.FaultPhase = 25 * time.Minute
	c.OrderRate = 10
	c.RuntimeBlocks = 30
	c.DrainTimeout = 8 * time.Minute
	c.ProgressEvery = time.Minute
	return c
}

// base holds what the presets share.
func base() Config {
	return Config{
		Seed:                   1,
		Dir:                    ".chaos",
		NATSConfig:             "configs/nats-server.conf",
		ClusterConfig:          "configs/nats-cluster",
		NodeKillEvery:          45 * time.Second,
		StepDownEvery:          20 * time.Second,
		PartitionEvery:         60 * time.Second,
		OrderRate:              13,
		OrdersPerChat:          5,
		RepeatFraction:         0.1,
		LateRepeatFraction:     0.05,
		PublisherKillEvery:     12 * time.Second,
		WorkerKillEvery:        15 * time.Second,
		NATSRestartEvery:       35 * time.Second,
		HardNATSFraction:       1.0 / 3,
		TelegramFaultEvery:     8 * time.Second,
		StandbyOn:              40 * time.Second,
		StandbyOff:             30 * time.Second,
		EmailShare:             0.35,
		PhoneShare:             0.3,
		MaxShare:               0.15,
		LongOutageFraction:     0.25,
		ChannelWorkerKillEvery: 20 * time.Second,
		MailpitRestartEvery:    30 * time.Second,
		ProviderFaultEvery:     20 * time.Second,
		Worker:                 defaultWorker(),
		Channels:               defaultChannels(),
		ReadyTimeout:           60 * time.Second,
		WorkerLogLevel:         "info",
		StopTimeout:            20 * time.Second,
	}
}

// Validate reports every unusable setting.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(c.Dir != "", "-dir must not be empty")
	check(c.FaultPhase >= 10*time.Second, "-duration %v: want at least 10s", c.FaultPhase)
	check(c.OrderRate > 0 && c.OrderRate <= 25, "-rate %v: want (0, 25] orders/s (Telegram takes 30 messages/s)", c.OrderRate)
	check(c.OrdersPerChat >= 2, "-orders-per-chat %d: want at least 2 (order is checked per chat)", c.OrdersPerChat)
	check(c.RepeatFraction >= 0 && c.RepeatFraction <= 1, "-repeat %v: want a fraction", c.RepeatFraction)
	check(c.LateRepeatFraction >= 0 && c.LateRepeatFraction <= 1, "-late-repeat %v: want a fraction", c.LateRepeatFraction)
	check(c.RuntimeBlocks >= 0, "-blocks %d must not be negative", c.RuntimeBlocks)
	for _, f := range []struct {
		flag string
		v    float64
	}{{"-email-share", c.EmailShare}, {"-phone-share", c.PhoneShare}, {"-max-share", c.MaxShare}, {"-long-outages", c.LongOutageFraction}} {
		check(f.v >= 0 && f.v <= 1, "%s %v: want a fraction", f.flag, f.v)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"-publisher-kill-every", c.PublisherKillEvery}, {"-worker-kill-every", c.WorkerKillEvery},
		{"-nats-restart-every", c.NATSRestartEvery}, {"-telegram-fault-every", c.TelegramFaultEvery},
		{"-standby-on", c.StandbyOn}, {"-standby-off", c.StandbyOff},
		{"-channel-worker-kill-every", c.ChannelWorkerKillEvery}, {"-mailpit-restart-every", c.MailpitRestartEvery},
		{"-provider-fault-every", c.ProviderFaultEvery}, {"-fallback-after", c.Channels.FallbackAfter},
		{"-node-kill-every", c.NodeKillEvery}, {"-step-down-every", c.StepDownEvery}, {"-partition-every", c.PartitionEvery},
		{"-drain-timeout", c.DrainTimeout}, {"-ready-timeout", c.ReadyTimeout}, {"-stop-timeout", c.StopTimeout},
		{"-progress", c.ProgressEvery},
	} {
		check(d.v > 0, "%s %v must be positive", d.flag, d.v)
	}
	check(c.HardNATSFraction >= 0 && c.HardNATSFraction <= 1, "-hard-nats %v: want a fraction", c.HardNATSFraction)
	check(slices.Contains([]string{"debug", "info", "warn", "error"}, c.WorkerLogLevel), "-worker-log-level %q: want debug, info, warn or error", c.WorkerLogLevel)
	w := c.Worker
	check(w.AckWait >= time.Second && w.PinnedTTL > 0 && w.BreakerOpen > 0 && w.BackoffBase > 0 &&
		w.BackoffCap >= w.BackoffBase && w.RequestTimeout > 0 && w.BreakerFailures > 0 && w.MaxInFlight > 0 && w.MaxAttempts > 0,
		"worker settings %+v are not usable", w)
	ch := c.Channels
	check(ch.EmailRate > 0 && ch.EmailPerRecipient > 0 && ch.SMSSegmentsPerSecond > 0 && ch.SMSRecipientsPerMinute > 0,
		"channel settings %+v are not usable", ch)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, name := range binaries(c.Cluster) {
		if _, err := os.Stat(filepath.Join(c.Bin, name)); err != nil {
			errs = append(errs, fmt.Errorf("binary %s not found in %s: run `make build` first (or set -bin)", name, c.Bin))
		}
	}
	if _, err := os.Stat(c.NATSConfig); err != nil {
		errs = append(errs, fmt.Errorf("-nats-config: %w (run from the repository root, or set -nats-config)", err))
	}
	if c.Cluster {
		if _, err := os.Stat(filepath.Join(c.ClusterConfig, "n1.conf")); err != nil {
			errs = append(errs, fmt.Errorf("-cluster-config: %w (run from the repository root, or set -cluster-config)", err))
		}
	}
	return errors.Join(errs...)
}

// binaries returns the programs a run starts; a cluster run provisions
// with tgnotify too.
func binaries(cluster bool) []string {
	all := []string{"nats-server", "botapi-emulator", "max-emulator", "sms-emulator", "mailpit", "shop", "publisher",
		"telegram-worker", "max-worker", "email-worker", "sms-worker"}
	if cluster {
		all = append(all, "tgnotify")
	}
	return all
}
