package jetstream_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

func TestDeclareUsesTheSharedNames(t *testing.T) {
	s := jetstream.DefaultSettings()
	s.Channels = []string{"telegram", "email"}
	d := jetstream.Declare(s)
	var objects []string
	for _, o := range d.Objects() {
		objects = append(objects, o.String())
	}
	want := []string{"stream NOTIFY", "stream NOTIFY_DEAD", "consumer telegram-worker on NOTIFY", "consumer email-worker on NOTIFY",
		"bucket notify_delivered", "bucket notify_chats", "bucket notify_attempts"}
	if !slices.Equal(objects, want) {
		t.Fatalf("declared objects %q, want %q", objects, want)
	}
	tg := d.Consumers[0].Config
	if tg.Durable != jetstream.ConsumerTelegram || tg.FilterSubject != jetstream.TelegramFilter ||
		!slices.Equal(tg.PriorityGroups, []string{jetstream.PriorityGroupTelegram}) || tg.PriorityPolicy != natsjs.PriorityPolicyPinned {
		t.Errorf("telegram consumer %+v: want durable %s, filter %s, pinned group %s", tg, jetstream.ConsumerTelegram, jetstream.TelegramFilter, jetstream.PriorityGroupTelegram)
	}
	if em := d.Consumers[1].Config; em.Durable != "email-worker" || em.FilterSubject != "notify.email.>" || !slices.Equal(em.PriorityGroups, []string{"email"}) {
		t.Errorf("email consumer %+v: want email-worker on notify.email.> in group email", em)
	}
	w, err := d.ForWorker("email")
	if err != nil || len(w.Consumers) != 1 || w.Consumers[0].Channel != "email" || len(w.Streams) != 2 || len(w.Buckets) != 3 {
		t.Errorf("ForWorker(email) = %+v, %v: want the streams, email's consumer and the buckets", w, err)
	}
	if _, err := d.ForWorker("sms"); err == nil || !strings.Contains(err.Error(), `no channel "sms"`) {
		t.Errorf("ForWorker(sms) = %v, want an error naming the channel", err)
	}
	if p := d.ForPublisher(); len(p.Streams) != 2 || len(p.Consumers)+len(p.Buckets) != 0 {
		t.Errorf("ForPublisher() = %+v, want the streams only", p)
	}
}

func TestSettingsValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		change func(*jetstream.Settings)
		want   string
	}{
		{func(s *jetstream.Settings) { s.Replicas = 0 }, "-replicas 0: must be between 1 and 5"},
		{func(s *jetstream.Settings) { s.MaxAge = time.Minute }, "-max-age 1m: must be at least -duplicate-window 2h"},
		{func(s *jetstream.Settings) { s.DeadMaxAge = 0 }, "-dead-max-age 0s: must be positive"},
		{func(s *jetstream.Settings) { s.AckWait = 10 * time.Millisecond }, "-ack-wait 10ms: must be at least 1s"},
		{func(s *jetstream.Settings) { s.MaxAckPending = 0 }, "-max-ack-pending 0: must be at least 1"},
		{func(s *jetstream.Settings) { s.PinnedTTL = 0 }, "-pinned-ttl 0s: must be at least 1s"},
		{func(s *jetstream.Settings) { s.DeliveredTTL = -time.Hour }, "-delivered-ttl -1h: must be positive"},
		{func(s *jetstream.Settings) { s.Channels = nil }, "-channels \"\": name at least one channel"},
		{func(s *jetstream.Settings) { s.Channels = []string{"telegram", "Tele gram"} }, `"Tele gram" is not a channel name`},
		{func(s *jetstream.Settings) { s.Channels = []string{"telegram", "telegram"} }, `"telegram" is named twice`},
	} {
		s := jetstream.DefaultSettings()
		tc.change(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
	if err := jetstream.DefaultSettings().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

func TestSettingsFlags(t *testing.T) {
	s := jetstream.DefaultSettings()
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	s.RegisterFlags(fs)
	if err := fs.Parse([]string{"-max-age", "10h", "-channels", "telegram, email", "-replicas", "3"}); err != nil {
		t.Fatal(err)
	}
	if s.MaxAge != 10*time.Hour || !slices.Equal(s.Channels, []string{"telegram", "email"}) || s.Replicas != 3 {
		t.Fatalf("parsed %+v", s)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if want := slices.Sorted(slices.Values(jetstream.SettingNames())); !slices.Equal(names, want) {
		t.Errorf("flags %q, want %q", names, want)
	}
	if got := fs.Lookup("dead-max-age").DefValue; got != "720h" {
		t.Errorf("-dead-max-age default shown as %q, want 720h", got)
	}
}

// changes renders changes as text.
func changes(cs []jetstream.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

func TestProvisionCreatesEverythingAndIsIdempotent(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	d := jetstream.Declare(jetstream.DefaultSettings())
	done, err := jetstream.Provision(ctx, js, d, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create stream NOTIFY", "create stream NOTIFY_DEAD", "create consumer telegram-worker on NOTIFY",
		"create consumer max-worker on NOTIFY", "create consumer email-worker on NOTIFY", "create consumer sms-worker on NOTIFY",
		"create bucket notify_delivered", "create bucket notify_chats", "create bucket notify_attempts"}
	if got := changes(done); !slices.Equal(got, want) {
		t.Fatalf("first provision: %q, want %q", got, want)
	}
	p, err := jetstream.Inspect(ctx, js, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Missing)+len(p.Drift) != 0 {
		t.Fatalf("after provisioning: missing %v, drift %v; want neither (a server default must not read as drift)", p.Missing, p.Drift)
	}
	if done, err := jetstream.Provision(ctx, js, d, false); err != nil || len(done) != 0 {
		t.Fatalf("second provision: %q, %v; want no change", changes(done), err)
	}
}

func TestProvisionUpdatesWhatDiffersAndDryRunChangesNothing(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if _, err := jetstream.Provision(ctx, js, jetstream.Declare(jetstream.DefaultSettings()), false); err != nil {
		t.Fatal(err)
	}
	s := jetstream.DefaultSettings()
	s.MaxAge, s.AckWait, s.DeliveredTTL = 10*time.Hour, 20*time.Second, 48*time.Hour
	d := jetstream.Declare(s)
	want := []string{
		"update stream NOTIFY: max_age 72h -> 10h",
		"update consumer telegram-worker on NOTIFY: ack_wait 10s -> 20s",
		"update consumer max-worker on NOTIFY: ack_wait 10s -> 20s",
		"update consumer email-worker on NOTIFY: ack_wait 10s -> 20s",
		"update consumer sms-worker on NOTIFY: ack_wait 10s -> 20s",
		"update bucket notify_delivered: ttl 168h -> 48h",
	}
	planned, err := jetstream.Provision(ctx, js, d, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(planned); !slices.Equal(got, want) {
		t.Fatalf("dry run: %q, want %q", got, want)
	}
	if got := streamConfig(t, js, "NOTIFY").MaxAge; got != jetstream.DefaultMaxAge {
		t.Fatalf("the dry run changed NOTIFY's max age to %v", got)
	}
	done, err := jetstream.Provision(ctx, js, d, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(done); !slices.Equal(got, want) {
		t.Fatalf("provision: %q, want %q", got, want)
	}
	if got := streamConfig(t, js, "NOTIFY").MaxAge; got != 10*time.Hour {
		t.Errorf("NOTIFY max age %v, want 10h", got)
	}
	c, err := js.Consumer(ctx, "NOTIFY", "telegram-worker")
	if err != nil || c.CachedInfo().Config.AckWait != 20*time.Second {
		t.Errorf("consumer ack wait: %v, want 20s", err)
	}
	if got := streamConfig(t, js, "KV_notify_delivered").MaxAge; got != 48*time.Hour {
		t.Errorf("notify_delivered TTL %v, want 48h", got)
	}
	if p, err := jetstream.Inspect(ctx, js, d); err != nil || len(p.Drift) != 0 {
		t.Errorf("after provisioning: drift %v, %v", p.Drift, err)
	}
}

// TestEnsureKeepsTheOperatorsValue is the daemons' start: an operator
// changed NOTIFY's max age during an incident; Ensure reports the drift and
// leaves the live value, and recreates what was deleted.
func TestEnsureKeepsTheOperatorsValue(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	d := jetstream.Declare(jetstream.DefaultSettings())
	if _, err := jetstream.Provision(ctx, js, d, false); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, "NOTIFY")
	cfg.MaxAge = 96 * time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "notify_attempts"); err != nil {
		t.Fatal(err)
	}
	p, err := jetstream.Ensure(ctx, js, d)
	if err != nil {
		t.Fatal(err)
	}
	wantDrift := []jetstream.Difference{{Object: jetstream.Object{Kind: "stream", Name: "NOTIFY"}, Field: "max_age", Live: "96h", Declared: "72h"}}
	if !slices.Equal(p.Drift, wantDrift) {
		t.Errorf("drift %v, want %v", p.Drift, wantDrift)
	}
	if fmt.Sprint(p.Missing) != "[bucket notify_attempts]" {
		t.Errorf("missing %v, want the deleted bucket", p.Missing)
	}
	if got := streamConfig(t, js, "NOTIFY").MaxAge; got != 96*time.Hour {
		t.Errorf("NOTIFY max age %v after Ensure, want the operator's 96h", got)
	}
	if _, err := js.KeyValue(ctx, "notify_attempts"); err != nil {
		t.Errorf("Ensure did not recreate the bucket: %v", err)
	}
}

func TestEnsureConcurrently(t *testing.T) {
	js := setup(t)
	d := jetstream.Declare(jetstream.DefaultSettings())
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = jetstream.Ensure(context.Background(), js, d)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Ensure %d: %v", i, err)
		}
	}
}

func TestInspectReportsEveryConflict(t *testing.T) {
	js := setup(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "NOTIFY", Subjects: []string{"notify.telegram.>"}, Storage: natsjs.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "NOTIFY", natsjs.ConsumerConfig{Durable: "telegram-worker", AckPolicy: natsjs.AckNonePolicy, FilterSubject: "notify.telegram.>"}); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.Inspect(ctx, js, jetstream.Declare(jetstream.DefaultSettings()))
	var conflict *jetstream.ConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, jetstream.ErrStreamConflict) || !errors.Is(err, jetstream.ErrConsumerConflict) {
		t.Fatalf("Inspect = %v, want stream and consumer conflicts", err)
	}
	for _, want := range []string{
		"stream NOTIFY exists with subjects [notify.telegram.>], want [notify.>]",
		"stream NOTIFY exists with storage Memory, want File",
		"consumer telegram-worker exists with ack_policy AckNone, want AckExplicit",
		"consumer telegram-worker exists with priority_policy none, want pinned_client",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not say %q", err, want)
		}
	}
	if _, err := jetstream.Provision(ctx, js, jetstream.Declare(jetstream.DefaultSettings()), false); !errors.Is(err, jetstream.ErrStreamConflict) {
		t.Errorf("Provision = %v, want the conflict", err)
	}
}
