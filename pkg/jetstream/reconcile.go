package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Difference is one field of a live object whose value differs from the
// declaration, and which can be changed in place.
type Difference struct {
	Object
	// Field is the configuration field, named as in the server's JSON
	// (max_age, duplicate_window, ack_wait; ttl and history for buckets).
	Field string
	// Live is the server's value, Declared the declaration's, as text.
	Live, Declared string
}

// String reads "stream NOTIFY max_age: live 1h, declared 72h".
func (d Difference) String() string {
	return fmt.Sprintf("%s %s: live %s, declared %s", d.Object, d.Field, d.Live, d.Declared)
}

// Change is what provisioning does, or would do, to one object.
type Change struct {
	// Action is "create" or "update".
	Action string
	// Object is the object changed.
	Object Object
	// Fields are the fields an update changes.
	Fields []Difference
}

// String reads "create stream NOTIFY" or
// "update stream NOTIFY: max_age 1h -> 72h, replicas 3 -> 1".
func (c Change) String() string {
	if len(c.Fields) == 0 {
		return c.Action + " " + c.Object.String()
	}
	parts := make([]string, len(c.Fields))
	for i, f := range c.Fields {
		parts[i] = f.Field + " " + f.Live + " -> " + f.Declared
	}
	return c.Action + " " + c.Object.String() + ": " + strings.Join(parts, ", ")
}

// Plan is how a server's objects compare with a declaration: which are
// missing, and which fields of the others differ. Make it with [Inspect].
type Plan struct {
	// Missing are the declared objects the server does not have.
	Missing []Object
	// Drift are the fields of existing objects whose live value differs
	// from the declared one.
	Drift []Difference
	decl  Declaration
}

// Changes returns what [Plan.Apply] would do: create the missing objects
// and, with update, change the drifted fields.
func (p *Plan) Changes(update bool) []Change {
	var out []Change
	for _, o := range p.Missing {
		out = append(out, Change{Action: "create", Object: o})
	}
	if !update {
		return out
	}
	for _, o := range p.decl.Objects() {
		var fields []Difference
		for _, d := range p.Drift {
			if d.Object == o {
				fields = append(fields, d)
			}
		}
		if len(fields) > 0 {
			out = append(out, Change{Action: "update", Object: o, Fields: fields})
		}
	}
	return out
}

// errRaced reports an object that was created by someone else between the
// inspection and the creation.
var errRaced = errors.New("created concurrently")

// Apply creates the missing objects and, with update, changes the drifted
// fields in place. It returns the changes made, up to the first error.
func (p *Plan) Apply(ctx context.Context, js natsjs.JetStream, update bool) ([]Change, error) {
	var done []Change
	for _, c := range p.Changes(update) {
		var err error
		if c.Action == "create" {
			err = p.create(ctx, js, c.Object)
		} else {
			err = p.update(ctx, js, c.Object)
		}
		if err != nil {
			return done, err
		}
		done = append(done, c)
	}
	return done, nil
}

// Inspect compares the server's objects with d. A field of an existing
// object that cannot be changed in place (subjects, retention, storage, ack
// policy, priority policy, ...) and differs is reported as a
// [*ConflictError]; all of them are, joined.
func Inspect(ctx context.Context, js natsjs.JetStream, d Declaration) (*Plan, error) {
	p := &Plan{decl: d}
	var conflicts []error
	missingStream := map[string]bool{}
	for _, want := range d.Streams {
		o := Object{Kind: KindStream, Name: want.Name}
		stream, err := js.Stream(ctx, want.Name)
		switch {
		case errors.Is(err, natsjs.ErrStreamNotFound):
			p.Missing = append(p.Missing, o)
			missingStream[want.Name] = true
			continue
		case err != nil:
			return nil, fmt.Errorf("looking up %s: %w", o, err)
		}
		diffs, errs := compare(o, streamFields, stream.CachedInfo().Config, want)
		p.Drift, conflicts = append(p.Drift, diffs...), append(conflicts, errs...)
	}
	for _, want := range d.Consumers {
		o := Object{Kind: KindConsumer, Name: want.Config.Durable, Stream: want.Stream}
		if missingStream[want.Stream] {
			p.Missing = append(p.Missing, o)
			continue
		}
		c, err := js.Consumer(ctx, want.Stream, want.Config.Durable)
		switch {
		case errors.Is(err, natsjs.ErrConsumerNotFound):
			p.Missing = append(p.Missing, o)
			continue
		case errors.Is(err, natsjs.ErrStreamNotFound):
			return nil, fmt.Errorf("looking up %s: stream %s does not exist and is not declared: %w", o, want.Stream, err)
		case err != nil:
			return nil, fmt.Errorf("looking up %s: %w", o, err)
		}
		diffs, errs := compare(o, consumerFields, c.CachedInfo().Config, want.Config)
		p.Drift, conflicts = append(p.Drift, diffs...), append(conflicts, errs...)
	}
	for _, want := range d.Buckets {
		o := Object{Kind: KindBucket, Name: want.Bucket}
		stream, err := js.Stream(ctx, bucketStream(want.Bucket))
		switch {
		case errors.Is(err, natsjs.ErrStreamNotFound):
			p.Missing = append(p.Missing, o)
			continue
		case err != nil:
			return nil, fmt.Errorf("looking up %s: %w", o, err)
		}
		diffs, errs := compare(o, bucketFields, stream.CachedInfo().Config, d.bucketConfig(want))
		p.Drift, conflicts = append(p.Drift, diffs...), append(conflicts, errs...)
	}
	if len(conflicts) > 0 {
		return nil, errors.Join(conflicts...)
	}
	return p, nil
}

// Ensure creates the objects of d the server does not have and changes
// nothing else: what a daemon does at start. It returns the plan it found,
// whose Drift lists the fields it left alone.
func Ensure(ctx context.Context, js natsjs.JetStream, d Declaration) (*Plan, error) {
	return reconcile(ctx, js, d, false, false)
}

// Provision creates the objects of d the server does not have and brings
// the drifted fields of the others to their declared values: what `tgnotify
// provision` does. It returns the changes made; with dryRun it makes none
// and returns the changes it would make. It is idempotent.
func Provision(ctx context.Context, js natsjs.JetStream, d Declaration, dryRun bool) ([]Change, error) {
	p, err := reconcile(ctx, js, d, true, dryRun)
	if err != nil || p == nil {
		return nil, err
	}
	return p.Changes(true), nil
}

// reconcile inspects and applies, inspecting again when another client
// created an object in between (two daemons starting together).
func reconcile(ctx context.Context, js natsjs.JetStream, d Declaration, update, dryRun bool) (*Plan, error) {
	for attempt := 1; ; attempt++ {
		p, err := Inspect(ctx, js, d)
		if err != nil || dryRun {
			return p, Denied(js.Conn(), err)
		}
		_, err = p.Apply(ctx, js, update)
		if errors.Is(err, errRaced) && attempt < 3 {
			continue
		}
		return p, Denied(js.Conn(), err)
	}
}

// create creates the declared object o.
func (p *Plan) create(ctx context.Context, js natsjs.JetStream, o Object) error {
	var err error
	switch o.Kind {
	case KindStream:
		_, err = js.CreateStream(ctx, p.stream(o.Name))
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			err = errRaced
		}
	case KindConsumer:
		_, err = js.CreateConsumer(ctx, o.Stream, p.consumer(o.Name).Config)
		if errors.Is(err, natsjs.ErrConsumerExists) {
			err = errRaced
		}
	case KindBucket:
		_, err = js.CreateKeyValue(ctx, p.bucket(o.Name))
		if errors.Is(err, natsjs.ErrBucketExists) {
			err = errRaced
		}
		if err == nil && slices.Contains(p.decl.AtomicBuckets, o.Name) {
			// nats.go creates a bucket without allow_atomic: set it on the
			// bucket's stream, as an update would.
			err = p.update(ctx, js, o)
		}
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", o, err)
	}
	return nil
}

// update sets the changeable fields of the live object o to their declared
// values, leaving every other field as it is.
func (p *Plan) update(ctx context.Context, js natsjs.JetStream, o Object) error {
	var err error
	switch o.Kind {
	case KindStream:
		var stream natsjs.Stream
		if stream, err = js.Stream(ctx, o.Name); err == nil {
			cfg := stream.CachedInfo().Config
			assign(streamFields, &cfg, p.stream(o.Name))
			_, err = js.UpdateStream(ctx, cfg)
		}
	case KindConsumer:
		var c natsjs.Consumer
		if c, err = js.Consumer(ctx, o.Stream, o.Name); err == nil {
			cfg := c.CachedInfo().Config
			assign(consumerFields, &cfg, p.consumer(o.Name).Config)
			_, err = js.UpdateConsumer(ctx, o.Stream, cfg)
		}
	case KindBucket:
		var stream natsjs.Stream
		if stream, err = js.Stream(ctx, bucketStream(o.Name)); err == nil {
			cfg := stream.CachedInfo().Config
			assign(bucketFields, &cfg, p.decl.bucketConfig(p.bucket(o.Name)))
			if cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge {
				cfg.Duplicates = cfg.MaxAge // as nats.go does for a bucket's TTL
			}
			_, err = js.UpdateStream(ctx, cfg)
		}
	}
	if err != nil {
		return fmt.Errorf("updating %s: %w", o, err)
	}
	return nil
}

func (p *Plan) stream(name string) natsjs.StreamConfig {
	i := slices.IndexFunc(p.decl.Streams, func(s natsjs.StreamConfig) bool { return s.Name == name })
	return p.decl.Streams[i]
}

func (p *Plan) consumer(name string) DeclaredConsumer {
	i := slices.IndexFunc(p.decl.Consumers, func(c DeclaredConsumer) bool { return c.Config.Durable == name })
	return p.decl.Consumers[i]
}

func (p *Plan) bucket(name string) natsjs.KeyValueConfig {
	i := slices.IndexFunc(p.decl.Buckets, func(b natsjs.KeyValueConfig) bool { return b.Bucket == name })
	return p.decl.Buckets[i]
}

// bucketStream is the stream behind a key-value bucket.
func bucketStream(bucket string) string { return "KV_" + bucket }

// bucketConfig is the part of a bucket's stream configuration d sets.
func (d Declaration) bucketConfig(b natsjs.KeyValueConfig) natsjs.StreamConfig {
	history := int64(b.History)
	if history < 1 {
		history = 1
	}
	return natsjs.StreamConfig{
		Description:        b.Description,
		MaxAge:             b.TTL,
		MaxMsgsPerSubject:  history,
		Replicas:           max(b.Replicas, 1),
		Storage:            b.Storage,
		AllowAtomicPublish: slices.Contains(d.AtomicBuckets, b.Bucket),
	}
}

// field is one compared configuration field of T.
type field[T any] struct {
	// name is the field's JSON name.
	name string
	// fixed fields cannot be changed in place: a difference is a conflict.
	fixed bool
	// get renders the field.
	get func(*T) string
	// set copies the field from src to dst (changeable fields only).
	set func(dst, src *T)
}

// compare returns the differences between live and want over fields: drift
// for changeable fields, conflicts for fixed ones.
func compare[T any](o Object, fields []field[T], live, want T) ([]Difference, []error) {
	var diffs []Difference
	var conflicts []error
	for _, f := range fields {
		l, w := f.get(&live), f.get(&want)
		switch {
		case l == w:
		case f.fixed:
			conflicts = append(conflicts, &ConflictError{Kind: o.Kind, Name: o.Name, Field: f.name, Have: l, Want: w})
		default:
			diffs = append(diffs, Difference{Object: o, Field: f.name, Live: l, Declared: w})
		}
	}
	return diffs, conflicts
}

// assign copies every changeable field of want into cfg.
func assign[T any](fields []field[T], cfg *T, want T) {
	for _, f := range fields {
		if !f.fixed {
			f.set(cfg, &want)
		}
	}
}

var streamFields = []field[natsjs.StreamConfig]{
	{name: "subjects", fixed: true, get: func(c *natsjs.StreamConfig) string {
		return "[" + strings.Join(slices.Sorted(slices.Values(c.Subjects)), " ") + "]"
	}},
	{name: "retention", fixed: true, get: func(c *natsjs.StreamConfig) string { return c.Retention.String() }},
	{name: "storage", fixed: true, get: func(c *natsjs.StreamConfig) string { return c.Storage.String() }},
	{name: "description", get: func(c *natsjs.StreamConfig) string { return strconv.Quote(c.Description) },
		set: func(d, s *natsjs.StreamConfig) { d.Description = s.Description }},
	{name: "discard", get: func(c *natsjs.StreamConfig) string { return c.Discard.String() },
		set: func(d, s *natsjs.StreamConfig) { d.Discard = s.Discard }},
	{name: "max_msgs", get: func(c *natsjs.StreamConfig) string { return strconv.FormatInt(c.MaxMsgs, 10) },
		set: func(d, s *natsjs.StreamConfig) { d.MaxMsgs = s.MaxMsgs }},
	{name: "max_bytes", get: func(c *natsjs.StreamConfig) string { return strconv.FormatInt(c.MaxBytes, 10) },
		set: func(d, s *natsjs.StreamConfig) { d.MaxBytes = s.MaxBytes }},
	{name: "max_age", get: func(c *natsjs.StreamConfig) string { return formatDuration(c.MaxAge) },
		set: func(d, s *natsjs.StreamConfig) { d.MaxAge = s.MaxAge }},
	{name: "duplicate_window", get: func(c *natsjs.StreamConfig) string { return formatDuration(c.Duplicates) },
		set: func(d, s *natsjs.StreamConfig) { d.Duplicates = s.Duplicates }},
	{name: "num_replicas", get: func(c *natsjs.StreamConfig) string { return strconv.Itoa(c.Replicas) },
		set: func(d, s *natsjs.StreamConfig) { d.Replicas = s.Replicas }},
	{name: "allow_direct", get: func(c *natsjs.StreamConfig) string { return strconv.FormatBool(c.AllowDirect) },
		set: func(d, s *natsjs.StreamConfig) { d.AllowDirect = s.AllowDirect }},
	{name: "allow_batched", get: func(c *natsjs.StreamConfig) string { return strconv.FormatBool(c.AllowBatchPublish) },
		set: func(d, s *natsjs.StreamConfig) { d.AllowBatchPublish = s.AllowBatchPublish }},
}

var bucketFields = []field[natsjs.StreamConfig]{
	{name: "storage", fixed: true, get: func(c *natsjs.StreamConfig) string { return c.Storage.String() }},
	{name: "description", get: func(c *natsjs.StreamConfig) string { return strconv.Quote(c.Description) },
		set: func(d, s *natsjs.StreamConfig) { d.Description = s.Description }},
	{name: "ttl", get: func(c *natsjs.StreamConfig) string { return formatDuration(c.MaxAge) },
		set: func(d, s *natsjs.StreamConfig) { d.MaxAge = s.MaxAge }},
	{name: "history", get: func(c *natsjs.StreamConfig) string { return strconv.FormatInt(c.MaxMsgsPerSubject, 10) },
		set: func(d, s *natsjs.StreamConfig) { d.MaxMsgsPerSubject = s.MaxMsgsPerSubject }},
	{name: "num_replicas", get: func(c *natsjs.StreamConfig) string { return strconv.Itoa(c.Replicas) },
		set: func(d, s *natsjs.StreamConfig) { d.Replicas = s.Replicas }},
	{name: "allow_atomic", get: func(c *natsjs.StreamConfig) string { return strconv.FormatBool(c.AllowAtomicPublish) },
		set: func(d, s *natsjs.StreamConfig) { d.AllowAtomicPublish = s.AllowAtomicPublish }},
}

var consumerFields = []field[natsjs.ConsumerConfig]{
	{name: "deliver_subject", fixed: true, get: func(c *natsjs.ConsumerConfig) string {
		if c.DeliverSubject == "" {
			return `"" (pull consumer)`
		}
		return strconv.Quote(c.DeliverSubject) + " (push consumer)"
	}},
	{name: "filter_subject", fixed: true, get: func(c *natsjs.ConsumerConfig) string {
		if len(c.FilterSubjects) > 0 {
			return strings.Join(c.FilterSubjects, ",")
		}
		return c.FilterSubject
	}},
	{name: "deliver_policy", fixed: true, get: func(c *natsjs.ConsumerConfig) string { return c.DeliverPolicy.String() }},
	{name: "ack_policy", fixed: true, get: func(c *natsjs.ConsumerConfig) string { return c.AckPolicy.String() }},
	{name: "priority_policy", fixed: true, get: func(c *natsjs.ConsumerConfig) string { return priorityName(c.PriorityPolicy) }},
	{name: "priority_groups", fixed: true, get: func(c *natsjs.ConsumerConfig) string { return fmt.Sprint(c.PriorityGroups) }},
	{name: "description", get: func(c *natsjs.ConsumerConfig) string { return strconv.Quote(c.Description) },
		set: func(d, s *natsjs.ConsumerConfig) { d.Description = s.Description }},
	{name: "ack_wait", get: func(c *natsjs.ConsumerConfig) string { return formatDuration(c.AckWait) },
		set: func(d, s *natsjs.ConsumerConfig) { d.AckWait = s.AckWait }},
	{name: "max_deliver", get: func(c *natsjs.ConsumerConfig) string { return strconv.Itoa(c.MaxDeliver) },
		set: func(d, s *natsjs.ConsumerConfig) { d.MaxDeliver = s.MaxDeliver }},
	{name: "max_ack_pending", get: func(c *natsjs.ConsumerConfig) string { return strconv.Itoa(c.MaxAckPending) },
		set: func(d, s *natsjs.ConsumerConfig) { d.MaxAckPending = s.MaxAckPending }},
	{name: "priority_timeout", get: func(c *natsjs.ConsumerConfig) string { return formatDuration(c.PinnedTTL) },
		set: func(d, s *natsjs.ConsumerConfig) { d.PinnedTTL = s.PinnedTTL }},
	{name: "num_replicas", get: func(c *natsjs.ConsumerConfig) string { return strconv.Itoa(c.Replicas) },
		set: func(d, s *natsjs.ConsumerConfig) { d.Replicas = s.Replicas }},
}

// OpenWorker returns handles to what a channel's worker uses: its durable
// consumer on NOTIFY and the key-value buckets. They must exist ([Ensure]).
func OpenWorker(ctx context.Context, js natsjs.JetStream, channel string) (*WorkerResources, error) {
	res := &WorkerResources{}
	name := ConsumerName(channel)
	var err error
	if res.Consumer, err = js.Consumer(ctx, StreamNotify, name); err != nil {
		return nil, fmt.Errorf("opening consumer %s on %s: %w", name, StreamNotify, err)
	}
	for _, b := range []struct {
		name string
		kv   *natsjs.KeyValue
	}{{BucketDelivered, &res.Delivered}, {BucketChats, &res.Chats}, {BucketAttempts, &res.Attempts}} {
		if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
			return nil, fmt.Errorf("opening bucket %s: %w", b.name, err)
		}
	}
	return res, nil
}
