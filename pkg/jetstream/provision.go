package jetstream

import (
	"context"
	"fmt"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Defaults of [Settings] ([DefaultSettings]), and of the zero fields of
// [StreamSettings] and [WorkerSettings].
const (
	// DefaultDuplicates is the de-duplication window of NOTIFY: how long
	// the stream remembers a Nats-Msg-Id. Two hours cover any publisher
	// restart, standby takeover or NATS outage the publisher rides out
	// while rows stay pending, so a row published again after a crash
	// between PubAck and marking is dropped by the stream. Past the window
	// a republished id would be stored again; the worker's delivery record
	// (notify_delivered, 7 days) still prevents a second send.
	DefaultDuplicates = 2 * time.Hour
	// DefaultMaxAge is how long NOTIFY keeps a message. It must be at least
	// the duplicate window, see [StreamSettings].
	DefaultMaxAge = 72 * time.Hour
	// DefaultDeadMaxAge is how long NOTIFY_DEAD keeps a dead letter.
	DefaultDeadMaxAge = 30 * 24 * time.Hour

	// DefaultAckWait is how long the worker has to ack a message before
	// JetStream redelivers it.
	DefaultAckWait = 10 * time.Second
	// DefaultMaxAckPending bounds the messages delivered but not yet acked:
	// the most the worker holds in its lanes, which bounds its memory.
	DefaultMaxAckPending = 10_000
	// DefaultPinnedTTL is how long a pinned worker may go without pulling
	// before a standby is pinned instead.
	DefaultPinnedTTL = 10 * time.Second
	// DefaultDeliveredTTL is how long a delivery record is kept.
	DefaultDeliveredTTL = 7 * 24 * time.Hour
	// DefaultAttemptsTTL is how long an attempt counter is kept.
	DefaultAttemptsTTL = 24 * time.Hour
)

// DefaultReplicas is the replication of every stream, consumer and bucket:
// 1 on a single server, 3 on a three-node cluster.
const DefaultReplicas = 1

// MinDuplicates is the smallest de-duplication window JetStream accepts.
const MinDuplicates = 100 * time.Millisecond

// StreamSettings are the tunable parts of the NOTIFY and NOTIFY_DEAD streams,
// for [ProvisionStreams]. Zero values take the defaults. The daemons and
// `tgnotify provision` use [Settings] instead, which declares every object
// in one place.
//
// NOTIFY uses Limits retention with MaxAge, not WorkQueue. JetStream rebuilds
// its de-duplication map after a server restart only from the messages still
// stored: with WorkQueue the worker's acks delete messages, so their ids would
// be forgotten and a publisher republishing them (after a crash between
// PubAck and marking) would store them again. With Limits retention every
// message stays for MaxAge, which is therefore at least the duplicate window,
// and the window holds across restarts.
type StreamSettings struct {
	// Prefix is the subject prefix ([Names]). Default notify.
	Prefix string
	// Replicas of both streams (1..5). Default 1; use 3 on a cluster.
	Replicas int
	// Duplicates is NOTIFY's de-duplication window. Default 2h.
	Duplicates time.Duration
	// MaxAge is how long NOTIFY keeps messages. Default 72h; at least
	// Duplicates.
	MaxAge time.Duration
	// DeadMaxAge is how long NOTIFY_DEAD keeps dead letters. Default 30 days.
	DeadMaxAge time.Duration
}

// settings returns s as [Settings], zero fields at their defaults.
func (s StreamSettings) settings() Settings {
	out := DefaultSettings()
	setNonZero(&out.Prefix, s.Prefix)
	setNonZero(&out.Replicas, s.Replicas)
	setNonZero(&out.Duplicates, s.Duplicates)
	setNonZero(&out.MaxAge, s.MaxAge)
	setNonZero(&out.DeadMaxAge, s.DeadMaxAge)
	return out
}

func setNonZero[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// Validate checks the settings after defaults are applied; the error names
// the setting ([Settings.Validate]).
func (s StreamSettings) Validate() error { return s.settings().Validate() }

// NotifyStreamConfig returns the configuration ProvisionStreams gives NOTIFY.
func NotifyStreamConfig(s StreamSettings) natsjs.StreamConfig {
	return Declare(s.settings()).Streams[0]
}

// DeadStreamConfig returns the configuration ProvisionStreams gives
// NOTIFY_DEAD.
func DeadStreamConfig(s StreamSettings) natsjs.StreamConfig {
	return Declare(s.settings()).Streams[1]
}

// ProvisionStreams creates NOTIFY and NOTIFY_DEAD, or brings existing ones up
// to date: [Provision] of the streams of s, for tests and embedders that own
// their server. It is idempotent.
//
// A stream whose subjects, retention or storage differ is left alone and
// reported as a [*ConflictError] matching [ErrStreamConflict]: rewriting
// those would drop or misroute messages.
func ProvisionStreams(ctx context.Context, js natsjs.JetStream, s StreamSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	_, err := Provision(ctx, js, Declare(s.settings()).ForPublisher(), false)
	return err
}

// WorkerSettings are the tunable parts of what the telegram worker needs:
// its durable consumer and its key-value buckets, for [ProvisionWorker].
// Zero values take the defaults.
type WorkerSettings struct {
	// Prefix is the subject prefix ([Names]). Default notify.
	Prefix string
	// Replicas of the consumer and the buckets (1..5). Default 1.
	Replicas int
	// AckWait is how long a delivered message may stay unacked before it is
	// redelivered. Default 30s.
	AckWait time.Duration
	// MaxAckPending bounds delivered but unacked messages. Default 10000.
	MaxAckPending int
	// PinnedTTL is how long the pinned worker may go without pulling before
	// a standby takes over. Default 10s.
	PinnedTTL time.Duration
	// DeliveredTTL is how long notify_delivered keeps a record. Default 7 days.
	DeliveredTTL time.Duration
	// AttemptsTTL is how long notify_attempts keeps a counter. Default 24h.
	AttemptsTTL time.Duration
}

// settings returns w as [Settings], zero fields at their defaults.
func (w WorkerSettings) settings() Settings {
	out := DefaultSettings()
	setNonZero(&out.Prefix, w.Prefix)
	setNonZero(&out.Replicas, w.Replicas)
	setNonZero(&out.AckWait, w.AckWait)
	setNonZero(&out.MaxAckPending, w.MaxAckPending)
	setNonZero(&out.PinnedTTL, w.PinnedTTL)
	setNonZero(&out.DeliveredTTL, w.DeliveredTTL)
	setNonZero(&out.AttemptsTTL, w.AttemptsTTL)
	return out
}

// Validate checks the settings after defaults are applied; the error names
// the setting ([Settings.Validate]).
func (w WorkerSettings) Validate() error { return w.settings().Validate() }

// WorkerConsumerConfig returns the configuration ProvisionWorker gives the
// telegram-worker consumer.
func WorkerConsumerConfig(w WorkerSettings) natsjs.ConsumerConfig {
	return Declare(w.settings()).Consumers[0].Config
}

// WorkerBucketConfigs returns the configurations ProvisionWorker gives the
// key-value buckets notify_delivered, notify_chats and notify_attempts.
func WorkerBucketConfigs(w WorkerSettings) []natsjs.KeyValueConfig {
	return Declare(w.settings()).Buckets
}

// WorkerResources are the JetStream objects the telegram worker uses.
type WorkerResources struct {
	// Names are the names the objects were opened under: the worker
	// publishes dead letters and events, and reads streams, by them. A zero
	// Names is [DefaultNames].
	Names Names
	// Consumer is the durable telegram-worker consumer on NOTIFY.
	Consumer natsjs.Consumer
	// Delivered, Chats and Attempts are the key-value buckets.
	Delivered, Chats, Attempts natsjs.KeyValue
}

// ProvisionWorker creates or updates the worker's durable consumer on NOTIFY
// and its key-value buckets, and returns handles to them: [Provision] of the
// telegram consumer and the buckets of w, for tests and embedders that own
// their server. It is idempotent. Call [ProvisionStreams] first: NOTIFY must
// exist.
//
// An existing consumer that is not a pull consumer with explicit acks, the
// channel's filter and the pinned priority group, or a bucket stored other
// than on file, is reported as a [*ConflictError] ([ErrConsumerConflict],
// [ErrBucketConflict]) and left alone. Other settings (ack wait, max ack
// pending, pinned TTL, bucket TTLs, replicas) are updated.
func ProvisionWorker(ctx context.Context, js natsjs.JetStream, w WorkerSettings) (*WorkerResources, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	n := w.settings().Names()
	if _, err := js.Stream(ctx, n.Stream); err != nil {
		return nil, fmt.Errorf("provisioning consumer %s: stream %s does not exist (provision the streams first): %w", ConsumerTelegram, n.Stream, err)
	}
	d, err := Declare(w.settings()).ForWorker(DefaultChannel)
	if err != nil {
		return nil, err
	}
	d.Streams = nil
	if _, err := Provision(ctx, js, d, false); err != nil {
		return nil, err
	}
	return OpenWorker(ctx, js, n, DefaultChannel)
}

func priorityName(p natsjs.PriorityPolicy) string {
	b, err := p.MarshalJSON()
	if err != nil || string(b) == `""` {
		return "none"
	}
	return strings.Trim(string(b), `"`)
}
