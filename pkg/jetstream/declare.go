package jetstream

import (
	"fmt"
	"slices"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Kinds of JetStream object, as [Object.Kind] and in metric labels.
const (
	KindStream   = "stream"
	KindConsumer = "consumer"
	KindBucket   = "bucket"
)

// Declaration is every JetStream object tgnotify needs, with its
// configuration: the one place they are declared. Build it with [Declare].
type Declaration struct {
	// Names are the names of the objects, made from the subject prefix.
	Names Names
	// Streams are NOTIFY and NOTIFY_DEAD (under another prefix, <PREFIX>
	// and <PREFIX>_DEAD).
	Streams []natsjs.StreamConfig
	// Consumers are the workers' durable consumers, one per channel.
	Consumers []DeclaredConsumer
	// Buckets are notify_delivered, notify_chats and notify_attempts
	// (<prefix>_delivered, ...).
	Buckets []natsjs.KeyValueConfig
	// AtomicBuckets are the buckets whose stream takes atomic batch
	// publishes (allow_atomic), which nats.go's KeyValueConfig cannot say:
	// notify_delivered, whose records the workers write in batches stored
	// with one fsync each (pkg/delivery, records.go).
	AtomicBuckets []string
}

// DeclaredConsumer is a durable consumer on a stream.
type DeclaredConsumer struct {
	// Stream is the stream the consumer reads.
	Stream string
	// Channel is the delivery channel whose worker pulls from it.
	Channel string
	// Config is its configuration.
	Config natsjs.ConsumerConfig
}

// ConsumerName returns the durable consumer of a delivery channel's workers:
// <channel>-worker (telegram-worker).
func ConsumerName(channel string) string { return channel + "-worker" }

// ChannelFilter returns the filter subject of a channel's consumer under
// [DefaultPrefix]: notify.<channel>.> ([Names.ChannelFilter]).
func ChannelFilter(channel string) string { return DefaultNames().ChannelFilter(channel) }

// Declare returns the objects s describes. s should be valid
// ([Settings.Validate]).
func Declare(s Settings) Declaration {
	n := s.Names()
	d := Declaration{
		Names: n,
		Streams: []natsjs.StreamConfig{
			{
				Name:        n.Stream,
				Description: "tgnotify notifications, one subject per chat",
				Subjects:    []string{n.StreamSubjects},
				Retention:   natsjs.LimitsPolicy,
				Storage:     natsjs.FileStorage,
				Discard:     natsjs.DiscardOld,
				MaxMsgs:     -1,
				MaxBytes:    -1,
				MaxAge:      s.MaxAge,
				Duplicates:  s.Duplicates,
				Replicas:    s.Replicas,
				AllowDirect: true,
				// The publisher writes in fast-ingest batches (nats-server
				// 2.14+): a batch is stored as a prefix, in order, even
				// across a stream leader change (docs/PUBLISHER.md).
				AllowBatchPublish: true,
				// The workers store the events they publish in atomic
				// batches (pkg/delivery, events.go), and the publisher
				// runs of fresh rows (pkg/publisher, atomicbatch.go):
				// one fsync for many.
				AllowAtomicPublish: true,
			},
			{
				Name:        n.DeadStream,
				Description: "tgnotify dead letters: notifications that will not be delivered",
				Subjects:    []string{n.DeadSubjects},
				Retention:   natsjs.LimitsPolicy,
				Storage:     natsjs.FileStorage,
				Discard:     natsjs.DiscardOld,
				MaxMsgs:     -1,
				MaxBytes:    -1,
				MaxAge:      s.DeadMaxAge,
				Duplicates:  min(s.Duplicates, s.DeadMaxAge),
				Replicas:    s.Replicas,
				AllowDirect: true,
			},
		},
		Buckets: []natsjs.KeyValueConfig{
			{Bucket: n.BucketDelivered, Description: "idempotency key -> delivery record", TTL: s.DeliveredTTL, Storage: natsjs.FileStorage, Replicas: s.Replicas, History: 1},
			{Bucket: n.BucketChats, Description: "per-chat state: dead.<chat>, migrated.<chat>", Storage: natsjs.FileStorage, Replicas: s.Replicas, History: 1},
			{Bucket: n.BucketAttempts, Description: "idempotency key -> delivery attempts", TTL: s.AttemptsTTL, Storage: natsjs.FileStorage, Replicas: s.Replicas, History: 1},
		},
		AtomicBuckets: []string{n.BucketDelivered},
	}
	for _, ch := range s.Channels {
		d.Consumers = append(d.Consumers, DeclaredConsumer{
			Stream:  n.Stream,
			Channel: ch,
			Config: natsjs.ConsumerConfig{
				Durable:        ConsumerName(ch),
				Description:    "tgnotify " + ch + " worker",
				FilterSubject:  n.ChannelFilter(ch),
				DeliverPolicy:  natsjs.DeliverAllPolicy,
				AckPolicy:      natsjs.AckExplicitPolicy,
				AckWait:        s.AckWait,
				MaxDeliver:     -1,
				MaxAckPending:  s.MaxAckPending,
				Replicas:       s.Replicas,
				PriorityPolicy: natsjs.PriorityPolicyPinned,
				PriorityGroups: []string{ch},
				PinnedTTL:      s.PinnedTTL,
			},
		})
	}
	return d
}

// ForPublisher returns the part of d the publisher needs: the streams.
func (d Declaration) ForPublisher() Declaration {
	return Declaration{Names: d.Names, Streams: d.Streams}
}

// ForWorker returns the part of d a channel's worker needs: the streams,
// the channel's consumer and the buckets. A channel d does not declare is
// an error.
func (d Declaration) ForWorker(channel string) (Declaration, error) {
	i := slices.IndexFunc(d.Consumers, func(c DeclaredConsumer) bool { return c.Channel == channel })
	if i < 0 {
		return Declaration{}, fmt.Errorf("the JetStream declaration has no channel %q (-%s)", channel, FlagChannels)
	}
	return Declaration{Names: d.Names, Streams: d.Streams, Consumers: d.Consumers[i : i+1], Buckets: d.Buckets, AtomicBuckets: d.AtomicBuckets}, nil
}

// Objects lists the objects of d in the order they are created: streams,
// consumers, buckets.
func (d Declaration) Objects() []Object {
	var out []Object
	for _, s := range d.Streams {
		out = append(out, Object{Kind: KindStream, Name: s.Name})
	}
	for _, c := range d.Consumers {
		out = append(out, Object{Kind: KindConsumer, Name: c.Config.Durable, Stream: c.Stream})
	}
	for _, b := range d.Buckets {
		out = append(out, Object{Kind: KindBucket, Name: b.Bucket})
	}
	return out
}

// Object names one JetStream object.
type Object struct {
	// Kind is [KindStream], [KindConsumer] or [KindBucket].
	Kind string
	// Name is the stream's, the durable consumer's or the bucket's name.
	Name string
	// Stream is the stream a consumer reads; "" for the others.
	Stream string
}

// String reads "stream NOTIFY", "consumer telegram-worker on NOTIFY" or
// "bucket notify_chats".
func (o Object) String() string {
	if o.Kind == KindConsumer {
		return o.Kind + " " + o.Name + " on " + o.Stream
	}
	return o.Kind + " " + o.Name
}
