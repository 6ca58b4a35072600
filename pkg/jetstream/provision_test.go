package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

func setup(t *testing.T) natsjs.JetStream {
	t.Helper()
	_, js := natstest.Start(t).Connect(t)
	return js
}

func streamConfig(t *testing.T, js natsjs.JetStream, name string) natsjs.StreamConfig {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

func TestProvisionStreamsCreatesTheDocumentedConfig(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	notify := streamConfig(t, js, jetstream.StreamNotify)
	if got := notify.Subjects; len(got) != 1 || got[0] != "notify.>" {
		t.Errorf("NOTIFY subjects = %v, want [notify.>]", got)
	}
	if notify.Retention != natsjs.LimitsPolicy {
		t.Errorf("NOTIFY retention = %v, want limits", notify.Retention)
	}
	if notify.Storage != natsjs.FileStorage {
		t.Errorf("NOTIFY storage = %v, want file", notify.Storage)
	}
	if notify.Duplicates != jetstream.DefaultDuplicates {
		t.Errorf("NOTIFY duplicates = %v, want %v", notify.Duplicates, jetstream.DefaultDuplicates)
	}
	if notify.MaxAge != jetstream.DefaultMaxAge {
		t.Errorf("NOTIFY max age = %v, want %v", notify.MaxAge, jetstream.DefaultMaxAge)
	}
	dead := streamConfig(t, js, jetstream.StreamDead)
	if got := dead.Subjects; len(got) != 1 || got[0] != "dead.>" {
		t.Errorf("NOTIFY_DEAD subjects = %v, want [dead.>]", got)
	}
	if dead.Retention != natsjs.LimitsPolicy || dead.MaxAge != jetstream.DefaultDeadMaxAge {
		t.Errorf("NOTIFY_DEAD retention %v max age %v, want limits and %v", dead.Retention, dead.MaxAge, jetstream.DefaultDeadMaxAge)
	}
}

func TestProvisionStreamsIsIdempotent(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	s := jetstream.StreamSettings{Duplicates: time.Hour, MaxAge: 5 * time.Hour}
	if err := jetstream.ProvisionStreams(ctx, js, s); err != nil {
		t.Fatal(err)
	}
	first := streamConfig(t, js, jetstream.StreamNotify)
	if err := jetstream.ProvisionStreams(ctx, js, s); err != nil {
		t.Fatalf("second provisioning: %v", err)
	}
	second := streamConfig(t, js, jetstream.StreamNotify)
	if first.Duplicates != second.Duplicates || first.MaxAge != second.MaxAge || first.Replicas != second.Replicas ||
		strings.Join(first.Subjects, ",") != strings.Join(second.Subjects, ",") {
		t.Errorf("config changed: %+v then %+v", first, second)
	}
}

func TestProvisionStreamsUpdatesCompatibleSettings(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	want := jetstream.StreamSettings{Duplicates: 30 * time.Minute, MaxAge: 10 * time.Hour, DeadMaxAge: 48 * time.Hour}
	if err := jetstream.ProvisionStreams(ctx, js, want); err != nil {
		t.Fatal(err)
	}
	got := streamConfig(t, js, jetstream.StreamNotify)
	if got.Duplicates != want.Duplicates || got.MaxAge != want.MaxAge {
		t.Errorf("NOTIFY duplicates %v max age %v, want %v and %v", got.Duplicates, got.MaxAge, want.Duplicates, want.MaxAge)
	}
	if dead := streamConfig(t, js, jetstream.StreamDead); dead.MaxAge != want.DeadMaxAge {
		t.Errorf("NOTIFY_DEAD max age %v, want %v", dead.MaxAge, want.DeadMaxAge)
	}
}

func TestProvisionStreamsReportsConflicts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   natsjs.StreamConfig
		field string
	}{
		{"subjects", natsjs.StreamConfig{Name: "NOTIFY", Subjects: []string{"other.>"}, Storage: natsjs.FileStorage}, "subjects"},
		{"retention", natsjs.StreamConfig{Name: "NOTIFY", Subjects: []string{"notify.>"}, Retention: natsjs.WorkQueuePolicy, Storage: natsjs.FileStorage}, "retention"},
		{"storage", natsjs.StreamConfig{Name: "NOTIFY", Subjects: []string{"notify.>"}, Storage: natsjs.MemoryStorage}, "storage"},
		{"dead retention", natsjs.StreamConfig{Name: "NOTIFY_DEAD", Subjects: []string{"dead.>"}, Retention: natsjs.InterestPolicy, Storage: natsjs.FileStorage}, "retention"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := setup(t)
			ctx := context.Background()
			if _, err := js.CreateStream(ctx, tc.cfg); err != nil {
				t.Fatal(err)
			}
			err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{})
			if !errors.Is(err, jetstream.ErrStreamConflict) {
				t.Fatalf("got %v, want ErrStreamConflict", err)
			}
			var ce *jetstream.ConflictError
			if !errors.As(err, &ce) || ce.Name != tc.cfg.Name || ce.Field != tc.field {
				t.Fatalf("got %#v, want a ConflictError naming %s and %s", err, tc.cfg.Name, tc.field)
			}
			for _, want := range []string{tc.cfg.Name, tc.field} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not name %q", err, want)
				}
			}
			// The existing stream is left alone.
			if got := streamConfig(t, js, tc.cfg.Name); strings.Join(got.Subjects, ",") != strings.Join(tc.cfg.Subjects, ",") ||
				got.Retention != tc.cfg.Retention || got.Storage != tc.cfg.Storage {
				t.Errorf("stream was rewritten: %+v", got)
			}
		})
	}
}

func TestStreamSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s     jetstream.StreamSettings
		field string
	}{
		{jetstream.StreamSettings{Replicas: 7}, "-replicas 7"},
		{jetstream.StreamSettings{Duplicates: time.Millisecond}, "-duplicate-window 1ms"},
		{jetstream.StreamSettings{Duplicates: 3 * time.Hour, MaxAge: time.Hour}, "-max-age 1h: must be at least -duplicate-window 3h"},
	} {
		if err := tc.s.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.s, err, tc.field)
		}
	}
	if err := (jetstream.StreamSettings{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestProvisionWorker(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if _, err := jetstream.ProvisionWorker(ctx, js, jetstream.WorkerSettings{}); err == nil {
		t.Fatal("provisioning the worker without NOTIFY succeeded")
	}
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	w := jetstream.WorkerSettings{AckWait: 20 * time.Second, MaxAckPending: 50, PinnedTTL: 5 * time.Second}
	res, err := jetstream.ProvisionWorker(ctx, js, w)
	if err != nil {
		t.Fatal(err)
	}
	cfg := res.Consumer.CachedInfo().Config
	switch {
	case cfg.Durable != "telegram-worker":
		t.Errorf("durable %q", cfg.Durable)
	case cfg.FilterSubject != "notify.telegram.>":
		t.Errorf("filter %q", cfg.FilterSubject)
	case cfg.AckPolicy != natsjs.AckExplicitPolicy:
		t.Errorf("ack policy %v", cfg.AckPolicy)
	case cfg.AckWait != w.AckWait || cfg.MaxAckPending != w.MaxAckPending || cfg.MaxDeliver != -1:
		t.Errorf("ack wait %v, max ack pending %d, max deliver %d", cfg.AckWait, cfg.MaxAckPending, cfg.MaxDeliver)
	case cfg.PriorityPolicy != natsjs.PriorityPolicyPinned || len(cfg.PriorityGroups) != 1 || cfg.PriorityGroups[0] != "telegram":
		t.Errorf("priority %v groups %v", cfg.PriorityPolicy, cfg.PriorityGroups)
	case cfg.PinnedTTL != w.PinnedTTL:
		t.Errorf("pinned TTL %v", cfg.PinnedTTL)
	}
	for _, kv := range []struct {
		h    natsjs.KeyValue
		name string
		ttl  time.Duration
	}{
		{res.Delivered, "notify_delivered", jetstream.DefaultDeliveredTTL},
		{res.Chats, "notify_chats", 0},
		{res.Attempts, "notify_attempts", jetstream.DefaultAttemptsTTL},
	} {
		st, err := kv.h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Bucket() != kv.name || st.TTL() != kv.ttl {
			t.Errorf("bucket %s TTL %v, want %s and %v", st.Bucket(), st.TTL(), kv.name, kv.ttl)
		}
	}

	// Idempotent, and compatible settings are updated.
	w.AckWait = 45 * time.Second
	w.AttemptsTTL = time.Hour
	res, err = jetstream.ProvisionWorker(ctx, js, w)
	if err != nil {
		t.Fatalf("second provisioning: %v", err)
	}
	if got := res.Consumer.CachedInfo().Config.AckWait; got != w.AckWait {
		t.Errorf("ack wait after update %v, want %v", got, w.AckWait)
	}
	st, err := res.Attempts.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Hour {
		t.Errorf("attempts TTL after update %v, want 1h", st.TTL())
	}
}

func TestProvisionWorkerReportsConflicts(t *testing.T) {
	t.Run("consumer", func(t *testing.T) {
		js := setup(t)
		ctx := context.Background()
		if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, "NOTIFY", natsjs.ConsumerConfig{Durable: "telegram-worker", AckPolicy: natsjs.AckNonePolicy}); err != nil {
			t.Fatal(err)
		}
		_, err := jetstream.ProvisionWorker(ctx, js, jetstream.WorkerSettings{})
		if !errors.Is(err, jetstream.ErrConsumerConflict) || !strings.Contains(err.Error(), "telegram-worker") {
			t.Fatalf("got %v, want ErrConsumerConflict naming telegram-worker", err)
		}
	})
	t.Run("bucket", func(t *testing.T) {
		js := setup(t)
		ctx := context.Background()
		if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: "notify_chats", Storage: natsjs.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
		_, err := jetstream.ProvisionWorker(ctx, js, jetstream.WorkerSettings{})
		if !errors.Is(err, jetstream.ErrBucketConflict) || !strings.Contains(err.Error(), "notify_chats") {
			t.Fatalf("got %v, want ErrBucketConflict naming notify_chats", err)
		}
	})
}

// notify_delivered takes atomic batches (the workers write their delivery
// records in batches); nats.go cannot create a bucket that way, so
// provisioning sets it on the bucket's stream, reports a bucket without it
// as drift, and brings it back.
func TestTheDeliveredBucketTakesAtomicBatches(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.ProvisionWorker(ctx, js, jetstream.WorkerSettings{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		stream string
		want   bool
	}{{"KV_notify_delivered", true}, {"KV_notify_chats", false}, {"KV_notify_attempts", false}} {
		if got := streamConfig(t, js, b.stream).AllowAtomicPublish; got != b.want {
			t.Errorf("%s allow_atomic = %v, want %v", b.stream, got, b.want)
		}
	}

	cfg := streamConfig(t, js, "KV_notify_delivered")
	cfg.AllowAtomicPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := jetstream.Declare(jetstream.DefaultSettings())
	p, err := jetstream.Inspect(ctx, js, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Drift) != 1 || p.Drift[0].Object.Name != jetstream.BucketDelivered || p.Drift[0].Field != "allow_atomic" {
		t.Fatalf("drift %+v, want allow_atomic of bucket notify_delivered", p.Drift)
	}
	if _, err := jetstream.Provision(ctx, js, d, false); err != nil {
		t.Fatal(err)
	}
	if !streamConfig(t, js, "KV_notify_delivered").AllowAtomicPublish {
		t.Error("provisioning did not set allow_atomic back")
	}
}
