package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Defaults of [StreamSettings] and [WorkerSettings].
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
	DefaultAckWait = 30 * time.Second
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

// StreamSettings are the tunable parts of the NOTIFY and NOTIFY_DEAD streams.
// Zero values take the defaults.
//
// NOTIFY uses Limits retention with MaxAge, not WorkQueue. JetStream rebuilds
// its de-duplication map after a server restart only from the messages still
// stored: with WorkQueue the worker's acks delete messages, so their ids would
// be forgotten and a publisher republishing them (after a crash between
// PubAck and marking) would store them again. With Limits retention every
// message stays for MaxAge, which is therefore at least the duplicate window,
// and the window holds across restarts.
type StreamSettings struct {
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

func (s StreamSettings) withDefaults() StreamSettings {
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Duplicates == 0 {
		s.Duplicates = DefaultDuplicates
	}
	if s.MaxAge == 0 {
		s.MaxAge = DefaultMaxAge
	}
	if s.DeadMaxAge == 0 {
		s.DeadMaxAge = DefaultDeadMaxAge
	}
	return s
}

// Validate checks the settings after defaults are applied; the error names
// the field.
func (s StreamSettings) Validate() error {
	s = s.withDefaults()
	switch {
	case s.Replicas < 1 || s.Replicas > 5:
		return fmt.Errorf("stream settings: Replicas %d must be between 1 and 5", s.Replicas)
	case s.Duplicates < MinDuplicates:
		return fmt.Errorf("stream settings: Duplicates %v must be at least %v", s.Duplicates, MinDuplicates)
	case s.MaxAge < s.Duplicates:
		return fmt.Errorf("stream settings: MaxAge %v must be at least Duplicates %v (the dedup window must be covered by stored messages)", s.MaxAge, s.Duplicates)
	case s.DeadMaxAge < 0:
		return fmt.Errorf("stream settings: DeadMaxAge %v must not be negative", s.DeadMaxAge)
	}
	return nil
}

// NotifyStreamConfig returns the configuration ProvisionStreams gives NOTIFY.
func NotifyStreamConfig(s StreamSettings) natsjs.StreamConfig {
	s = s.withDefaults()
	return natsjs.StreamConfig{
		Name:        StreamNotify,
		Description: "tgnotify notifications, one subject per chat",
		Subjects:    []string{StreamNotifySubjects},
		Retention:   natsjs.LimitsPolicy,
		Storage:     natsjs.FileStorage,
		Discard:     natsjs.DiscardOld,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      s.MaxAge,
		Duplicates:  s.Duplicates,
		Replicas:    s.Replicas,
		AllowDirect: true,
	}
}

// DeadStreamConfig returns the configuration ProvisionStreams gives
// NOTIFY_DEAD.
func DeadStreamConfig(s StreamSettings) natsjs.StreamConfig {
	s = s.withDefaults()
	return natsjs.StreamConfig{
		Name:        StreamDead,
		Description: "tgnotify dead letters: notifications that will not be delivered",
		Subjects:    []string{StreamDeadSubjects},
		Retention:   natsjs.LimitsPolicy,
		Storage:     natsjs.FileStorage,
		Discard:     natsjs.DiscardOld,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      s.DeadMaxAge,
		Duplicates:  min(s.Duplicates, s.DeadMaxAge),
		Replicas:    s.Replicas,
		AllowDirect: true,
	}
}

// ProvisionStreams creates NOTIFY and NOTIFY_DEAD, or brings existing ones up
// to date. It is idempotent: running it twice leaves the same configuration.
//
// The duplicate window, max age and replicas of an existing stream are
// updated to the settings. A stream whose subjects, retention or storage
// differ is left alone and reported as a [*ConflictError] matching
// [ErrStreamConflict]: rewriting those would drop or misroute messages.
func ProvisionStreams(ctx context.Context, js natsjs.JetStream, s StreamSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	for _, want := range []natsjs.StreamConfig{NotifyStreamConfig(s), DeadStreamConfig(s)} {
		if err := ensureStream(ctx, js, want); err != nil {
			return err
		}
	}
	return nil
}

// ensureStream creates the stream, or checks and updates an existing one.
func ensureStream(ctx context.Context, js natsjs.JetStream, want natsjs.StreamConfig) error {
	for attempt := 0; ; attempt++ {
		stream, err := js.Stream(ctx, want.Name)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, want)
			if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) && attempt == 0 {
				continue // created concurrently: check it like an existing one
			}
			if err != nil {
				return fmt.Errorf("creating stream %s: %w", want.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("looking up stream %s: %w", want.Name, err)
		}
		have := stream.CachedInfo().Config
		if err := checkStream(have, want); err != nil {
			return err
		}
		updated := have
		updated.Duplicates = want.Duplicates
		updated.MaxAge = want.MaxAge
		updated.Replicas = want.Replicas
		if updated.Duplicates == have.Duplicates && updated.MaxAge == have.MaxAge && updated.Replicas == have.Replicas {
			return nil
		}
		if _, err := js.UpdateStream(ctx, updated); err != nil {
			return fmt.Errorf("updating stream %s (duplicates %v, max age %v, replicas %d): %w",
				want.Name, want.Duplicates, want.MaxAge, want.Replicas, err)
		}
		return nil
	}
}

// checkStream reports the first field of have that provisioning must not
// change to match want.
func checkStream(have, want natsjs.StreamConfig) error {
	conflict := func(field, h, w string) error {
		return &ConflictError{Kind: "stream", Name: want.Name, Field: field, Have: h, Want: w}
	}
	hs, ws := slices.Sorted(slices.Values(have.Subjects)), slices.Sorted(slices.Values(want.Subjects))
	if !slices.Equal(hs, ws) {
		return conflict("subjects", "["+strings.Join(hs, " ")+"]", "["+strings.Join(ws, " ")+"]")
	}
	if have.Retention != want.Retention {
		return conflict("retention", have.Retention.String(), want.Retention.String())
	}
	if have.Storage != want.Storage {
		return conflict("storage", have.Storage.String(), want.Storage.String())
	}
	return nil
}

// WorkerSettings are the tunable parts of what the telegram worker needs:
// its durable consumer and its key-value buckets. Zero values take the
// defaults.
type WorkerSettings struct {
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

func (w WorkerSettings) withDefaults() WorkerSettings {
	if w.Replicas == 0 {
		w.Replicas = 1
	}
	if w.AckWait == 0 {
		w.AckWait = DefaultAckWait
	}
	if w.MaxAckPending == 0 {
		w.MaxAckPending = DefaultMaxAckPending
	}
	if w.PinnedTTL == 0 {
		w.PinnedTTL = DefaultPinnedTTL
	}
	if w.DeliveredTTL == 0 {
		w.DeliveredTTL = DefaultDeliveredTTL
	}
	if w.AttemptsTTL == 0 {
		w.AttemptsTTL = DefaultAttemptsTTL
	}
	return w
}

// Validate checks the settings after defaults are applied; the error names
// the field.
func (w WorkerSettings) Validate() error {
	w = w.withDefaults()
	switch {
	case w.Replicas < 1 || w.Replicas > 5:
		return fmt.Errorf("worker settings: Replicas %d must be between 1 and 5", w.Replicas)
	case w.AckWait < time.Second:
		return fmt.Errorf("worker settings: AckWait %v must be at least 1s", w.AckWait)
	case w.MaxAckPending < 1:
		return fmt.Errorf("worker settings: MaxAckPending %d must be positive", w.MaxAckPending)
	case w.PinnedTTL < time.Second:
		return fmt.Errorf("worker settings: PinnedTTL %v must be at least 1s", w.PinnedTTL)
	case w.DeliveredTTL < 0:
		return fmt.Errorf("worker settings: DeliveredTTL %v must not be negative", w.DeliveredTTL)
	case w.AttemptsTTL < 0:
		return fmt.Errorf("worker settings: AttemptsTTL %v must not be negative", w.AttemptsTTL)
	}
	return nil
}

// WorkerConsumerConfig returns the configuration ProvisionWorker gives the
// telegram-worker consumer.
func WorkerConsumerConfig(w WorkerSettings) natsjs.ConsumerConfig {
	w = w.withDefaults()
	return natsjs.ConsumerConfig{
		Durable:        ConsumerTelegram,
		Description:    "tgnotify telegram worker",
		FilterSubject:  TelegramFilter,
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        w.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  w.MaxAckPending,
		Replicas:       w.Replicas,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{PriorityGroupTelegram},
		PinnedTTL:      w.PinnedTTL,
	}
}

// WorkerBucketConfigs returns the configurations ProvisionWorker gives the
// key-value buckets notify_delivered, notify_chats and notify_attempts.
func WorkerBucketConfigs(w WorkerSettings) []natsjs.KeyValueConfig {
	w = w.withDefaults()
	return []natsjs.KeyValueConfig{
		{Bucket: BucketDelivered, Description: "idempotency key -> delivery record", TTL: w.DeliveredTTL, Storage: natsjs.FileStorage, Replicas: w.Replicas, History: 1},
		{Bucket: BucketChats, Description: "per-chat state: dead.<chat>, migrated.<chat>", Storage: natsjs.FileStorage, Replicas: w.Replicas, History: 1},
		{Bucket: BucketAttempts, Description: "idempotency key -> delivery attempts", TTL: w.AttemptsTTL, Storage: natsjs.FileStorage, Replicas: w.Replicas, History: 1},
	}
}

// WorkerResources are the JetStream objects the telegram worker uses.
type WorkerResources struct {
	// Consumer is the durable telegram-worker consumer on NOTIFY.
	Consumer natsjs.Consumer
	// Delivered, Chats and Attempts are the key-value buckets.
	Delivered, Chats, Attempts natsjs.KeyValue
}

// ProvisionWorker creates or updates the worker's durable consumer on NOTIFY
// and its key-value buckets, and returns handles to them. It is idempotent.
// Call [ProvisionStreams] first: NOTIFY must exist.
//
// An existing consumer that is not a pull consumer with explicit acks and the
// pinned priority group, or a bucket stored other than on file, is reported
// as a [*ConflictError] ([ErrConsumerConflict], [ErrBucketConflict]) and left
// alone. Other settings (ack wait, max ack pending, pinned TTL, bucket TTLs,
// replicas) are updated.
func ProvisionWorker(ctx context.Context, js natsjs.JetStream, w WorkerSettings) (*WorkerResources, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	want := WorkerConsumerConfig(w)
	existing, err := js.Consumer(ctx, StreamNotify, want.Durable)
	switch {
	case errors.Is(err, natsjs.ErrConsumerNotFound):
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return nil, fmt.Errorf("provisioning consumer %s: stream %s does not exist (provision the streams first): %w", want.Durable, StreamNotify, err)
	case err != nil:
		return nil, fmt.Errorf("looking up consumer %s: %w", want.Durable, err)
	default:
		if err := checkConsumer(existing.CachedInfo().Config, want); err != nil {
			return nil, err
		}
	}
	res := &WorkerResources{}
	if res.Consumer, err = js.CreateOrUpdateConsumer(ctx, StreamNotify, want); err != nil {
		return nil, fmt.Errorf("creating or updating consumer %s on %s: %w", want.Durable, StreamNotify, err)
	}
	kvs := make([]natsjs.KeyValue, 0, 3)
	for _, cfg := range WorkerBucketConfigs(w) {
		kv, err := ensureBucket(ctx, js, cfg)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, kv)
	}
	res.Delivered, res.Chats, res.Attempts = kvs[0], kvs[1], kvs[2]
	return res, nil
}

// checkConsumer reports the first field of an existing consumer that cannot
// be changed in place to match want.
func checkConsumer(have, want natsjs.ConsumerConfig) error {
	conflict := func(field, h, w string) error {
		return &ConflictError{Kind: "consumer", Name: want.Durable, Field: field, Have: h, Want: w}
	}
	switch {
	case have.DeliverSubject != "":
		return conflict("deliver subject", fmt.Sprintf("%q (push consumer)", have.DeliverSubject), `"" (pull consumer)`)
	case have.AckPolicy != want.AckPolicy:
		return conflict("ack policy", have.AckPolicy.String(), want.AckPolicy.String())
	case have.PriorityPolicy != want.PriorityPolicy:
		return conflict("priority policy", priorityName(have.PriorityPolicy), priorityName(want.PriorityPolicy))
	case !slices.Equal(have.PriorityGroups, want.PriorityGroups):
		return conflict("priority groups", fmt.Sprint(have.PriorityGroups), fmt.Sprint(want.PriorityGroups))
	}
	return nil
}

func priorityName(p natsjs.PriorityPolicy) string {
	b, err := p.MarshalJSON()
	if err != nil || string(b) == `""` {
		return "none"
	}
	return strings.Trim(string(b), `"`)
}

// ensureBucket creates or updates a key-value bucket after checking that an
// existing one is stored the same way.
func ensureBucket(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error) {
	stream, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
	case err != nil:
		return nil, fmt.Errorf("looking up bucket %s: %w", cfg.Bucket, err)
	default:
		if have := stream.CachedInfo().Config.Storage; have != cfg.Storage {
			return nil, &ConflictError{Kind: "bucket", Name: cfg.Bucket, Field: "storage", Have: have.String(), Want: cfg.Storage.String()}
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating or updating bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
