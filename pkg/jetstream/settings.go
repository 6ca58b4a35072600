package jetstream

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultChannel is Telegram, the first channel.
const DefaultChannel = "telegram"

// DefaultChannels returns the channels declared when none are: every
// channel tgnotify has a worker for. A channel whose worker does not run
// costs an idle consumer; a notification routed to it waits there (and shows
// in its consumer's pending count) until one does.
func DefaultChannels() []string { return []string{"telegram", "max", "email", "sms"} }

// Settings are every tunable of the JetStream objects tgnotify uses, in one
// place: the streams NOTIFY and NOTIFY_DEAD, one durable consumer per
// delivery channel, and the key-value buckets. [Declare] turns them into the
// objects' configurations; `tgnotify provision` applies them; the daemons
// read the same settings to create what is missing and to report drift.
//
// Start from [DefaultSettings]. Each setting has a flag and a YAML key of
// the same name ([Settings.RegisterFlags]), which [Settings.Validate] names
// in its errors.
type Settings struct {
	// Prefix is the subject prefix every stream, subject, bucket and event
	// name is made from ([Names]), so that two deployments share a NATS
	// account; empty or [DefaultPrefix] keeps the historical names. Flag
	// -subject-prefix.
	Prefix string
	// Replicas of every stream, consumer and bucket (1..5): 1 on a single
	// server, 3 on a three-node cluster. Flag -replicas.
	Replicas int
	// Duplicates is NOTIFY's de-duplication window. Flag -duplicate-window.
	Duplicates time.Duration
	// MaxAge is how long NOTIFY keeps messages; at least Duplicates. Flag
	// -max-age.
	MaxAge time.Duration
	// DeadMaxAge is how long NOTIFY_DEAD keeps dead letters. Flag
	// -dead-max-age.
	DeadMaxAge time.Duration
	// AckWait is how long a delivered message may stay unacked before the
	// consumer redelivers it. Flag -ack-wait.
	AckWait time.Duration
	// MaxAckPending bounds the messages delivered to a worker and not yet
	// acked. Flag -max-ack-pending.
	MaxAckPending int
	// PinnedTTL is how long the pinned worker may go without pulling before
	// a standby is pinned instead. Flag -pinned-ttl.
	PinnedTTL time.Duration
	// DeliveredTTL is how long notify_delivered keeps a delivery record.
	// Flag -delivered-ttl.
	DeliveredTTL time.Duration
	// AttemptsTTL is how long notify_attempts keeps a counter. Flag
	// -attempts-ttl.
	AttemptsTTL time.Duration
	// Channels are the delivery channels: each gets its durable consumer
	// <channel>-worker on notify.<channel>.> with the pinned priority group
	// <channel>. Flag -channels (comma-separated).
	Channels []string
}

// DefaultSettings returns the settings tgnotify ships with.
func DefaultSettings() Settings {
	return Settings{
		Prefix:        DefaultPrefix,
		Replicas:      DefaultReplicas,
		Duplicates:    DefaultDuplicates,
		MaxAge:        DefaultMaxAge,
		DeadMaxAge:    DefaultDeadMaxAge,
		AckWait:       DefaultAckWait,
		MaxAckPending: DefaultMaxAckPending,
		PinnedTTL:     DefaultPinnedTTL,
		DeliveredTTL:  DefaultDeliveredTTL,
		AttemptsTTL:   DefaultAttemptsTTL,
		Channels:      DefaultChannels(),
	}
}

// The flag names (and YAML keys) of the settings (the subject prefix's is
// [FlagPrefix], with the names it makes).
const (
	FlagReplicas      = "replicas"
	FlagDuplicates    = "duplicate-window"
	FlagMaxAge        = "max-age"
	FlagDeadMaxAge    = "dead-max-age"
	FlagAckWait       = "ack-wait"
	FlagMaxAckPending = "max-ack-pending"
	FlagPinnedTTL     = "pinned-ttl"
	FlagDeliveredTTL  = "delivered-ttl"
	FlagAttemptsTTL   = "attempts-ttl"
	FlagChannels      = "channels"
)

// SettingNames lists the flag names of the settings, in declaration order.
func SettingNames() []string {
	return []string{FlagPrefix, FlagReplicas, FlagDuplicates, FlagMaxAge, FlagDeadMaxAge, FlagAckWait,
		FlagMaxAckPending, FlagPinnedTTL, FlagDeliveredTTL, FlagAttemptsTTL, FlagChannels}
}

// RegisterFlags registers one flag per setting on fs, bound to s; the
// current values of s are the defaults.
func (s *Settings) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Prefix, FlagPrefix, s.Prefix, "subject `prefix` of every stream, subject, bucket and event name, so that two environments share a NATS account: notify keeps NOTIFY, notify.>, notify_delivered, ...; staging makes STAGING, staging.>, staging_delivered, ...")
	fs.IntVar(&s.Replicas, FlagReplicas, s.Replicas, "replicas of every stream, consumer and bucket: 1 on one server, 3 on a three-node cluster")
	fs.Var(durationValue{&s.Duplicates}, FlagDuplicates, "NOTIFY de-duplication window: a message id published again within it is dropped")
	fs.Var(durationValue{&s.MaxAge}, FlagMaxAge, "how long NOTIFY keeps messages (at least -"+FlagDuplicates+")")
	fs.Var(durationValue{&s.DeadMaxAge}, FlagDeadMaxAge, "how long NOTIFY_DEAD keeps dead letters")
	fs.Var(durationValue{&s.AckWait}, FlagAckWait, "consumer ack wait: an unacked message is redelivered after it (the worker keeps held ones alive every third of it)")
	fs.IntVar(&s.MaxAckPending, FlagMaxAckPending, s.MaxAckPending, "messages delivered to a worker and not yet acked; bounds the worker's memory")
	fs.Var(durationValue{&s.PinnedTTL}, FlagPinnedTTL, "how long the active worker may go without pulling before a standby takes over")
	fs.Var(durationValue{&s.DeliveredTTL}, FlagDeliveredTTL, "how long notify_delivered keeps a delivery record (a replay within it is never sent twice)")
	fs.Var(durationValue{&s.AttemptsTTL}, FlagAttemptsTTL, "how long notify_attempts keeps an attempt counter")
	fs.Var(channelsValue{&s.Channels}, FlagChannels, "delivery channels, comma-separated: one consumer <channel>-worker each")
}

// channelName is what a channel may be called: a subject token and part of
// a consumer name.
var channelName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Validate reports every invalid setting; each error names the setting's
// flag and value: "-max-age 1m: must be at least -duplicate-window 2h".
func (s Settings) Validate() error {
	var errs []error
	bad := func(flag, value, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s %s: %s", flag, value, fmt.Sprintf(format, args...)))
	}
	if s.Prefix != "" {
		if err := ValidatePrefix(s.Prefix); err != nil {
			bad(FlagPrefix, s.Prefix, "%v", err)
		}
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		bad(FlagReplicas, strconv.Itoa(s.Replicas), "must be between 1 and 5")
	}
	if s.Duplicates < MinDuplicates {
		bad(FlagDuplicates, formatDuration(s.Duplicates), "must be at least %s", formatDuration(MinDuplicates))
	}
	if s.MaxAge < s.Duplicates {
		bad(FlagMaxAge, formatDuration(s.MaxAge), "must be at least -%s %s (the de-duplication window must be covered by stored messages)",
			FlagDuplicates, formatDuration(s.Duplicates))
	}
	if s.DeadMaxAge <= 0 {
		bad(FlagDeadMaxAge, formatDuration(s.DeadMaxAge), "must be positive")
	}
	if s.AckWait < time.Second {
		bad(FlagAckWait, formatDuration(s.AckWait), "must be at least 1s")
	}
	if s.MaxAckPending < 1 {
		bad(FlagMaxAckPending, strconv.Itoa(s.MaxAckPending), "must be at least 1")
	}
	if s.PinnedTTL < time.Second {
		bad(FlagPinnedTTL, formatDuration(s.PinnedTTL), "must be at least 1s")
	}
	if s.DeliveredTTL <= 0 {
		bad(FlagDeliveredTTL, formatDuration(s.DeliveredTTL), "must be positive")
	}
	if s.AttemptsTTL <= 0 {
		bad(FlagAttemptsTTL, formatDuration(s.AttemptsTTL), "must be positive")
	}
	channels := strings.Join(s.Channels, ",")
	switch {
	case len(s.Channels) == 0:
		bad(FlagChannels, `""`, "name at least one channel")
	default:
		for i, c := range s.Channels {
			switch {
			case !channelName.MatchString(c):
				bad(FlagChannels, channels, "%q is not a channel name (lower case letters, digits, - and _)", c)
			case slices.Contains(s.Channels[:i], c):
				bad(FlagChannels, channels, "%q is named twice", c)
			}
		}
	}
	return errors.Join(errs...)
}

// Names returns the names made from s.Prefix ([NewNames]); an empty
// prefix is [DefaultPrefix]. s.Prefix should be valid ([Settings.Validate]).
func (s Settings) Names() Names {
	if s.Prefix == "" {
		return DefaultNames()
	}
	return names(s.Prefix)
}

// formatDuration writes d the way people write durations: 72h, 1h30m,
// 500ms, instead of time.Duration's 72h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// durationValue is a duration flag shown the short way (72h).
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return formatDuration(*d.p)
}

// Get returns the duration (flag.Getter).
func (d durationValue) Get() any { return *d.p }

func (d durationValue) Set(v string) error {
	x, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return errors.New("not a duration (write it like 500ms, 30s, 2h)")
	}
	*d.p = x
	return nil
}

// channelsValue is a comma-separated list of channels.
type channelsValue struct{ p *[]string }

func (c channelsValue) String() string {
	if c.p == nil {
		return ""
	}
	return strings.Join(*c.p, ",")
}

// Get returns the channels (flag.Getter).
func (c channelsValue) Get() any { return *c.p }

func (c channelsValue) Set(v string) error {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	*c.p = out
	return nil
}
