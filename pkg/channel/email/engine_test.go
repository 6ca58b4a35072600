package email_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/mailpittest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// startEngine provisions what an email worker needs on env's JetStream —
// the durable pull consumer email-worker on NOTIFY (filter notify.email.>,
// explicit acks, pinned priority group email) and the three buckets, as
// jetstream.ProvisionWorker does for telegram — and runs the delivery
// engine with ch until the end of the test.
func startEngine(t *testing.T, env *testenv.Env, ch *email.Channel) *delivery.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	settings := jetstream.WorkerSettings{AckWait: 5 * time.Second, PinnedTTL: 2 * time.Second, MaxAckPending: 1000}
	cons, err := env.JS.CreateOrUpdateConsumer(ctx, jetstream.StreamNotify, natsjs.ConsumerConfig{
		Durable:        email.Name + "-worker",
		Description:    "tgnotify email worker (test)",
		FilterSubject:  jetstream.Subject(email.Name, ">"),
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        settings.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  settings.MaxAckPending,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{email.Name},
		PinnedTTL:      settings.PinnedTTL,
	})
	if err != nil {
		t.Fatalf("creating the email-worker consumer: %v", err)
	}
	res := &jetstream.WorkerResources{Consumer: cons}
	buckets := []*natsjs.KeyValue{&res.Delivered, &res.Chats, &res.Attempts}
	for i, cfg := range jetstream.WorkerBucketConfigs(settings) {
		if *buckets[i], err = env.JS.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			t.Fatalf("creating bucket %s: %v", cfg.Bucket, err)
		}
	}
	w, err := delivery.New(delivery.Config{AckWait: settings.AckWait, StatsInterval: 200 * time.Millisecond, BackoffBase: 100 * time.Millisecond},
		delivery.Deps{JS: env.JS, Resources: res, Channel: ch, Logger: env.Log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("delivery.New: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker Run returned %v, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop within 30s")
		}
	})
	natstest.WaitFor(t, 20*time.Second, func() bool { return w.Ready() == nil }, "email worker ready")
	return w
}

// publish puts n on its email subject as the publisher would, with msgID
// as Nats-Msg-Id (the key, or another id for a replay).
func publish(t *testing.T, env *testenv.Env, n notify.Notification, msgID string) {
	t.Helper()
	payload, err := n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	token, err := n.Recipient(notify.ChannelEmail)
	if err != nil {
		t.Fatal(err)
	}
	m := jetstream.Msg(jetstream.Subject(email.Name, token), n.Key, n.CreatedAt, notify.PayloadContentType, payload)
	m.Header.Set(jetstream.HeaderMsgID, msgID)
	if _, err := env.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publishing %s: %v", n.Key, err)
	}
}

func TestEngineDeliversOnceThroughMailpit(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{})
	env := testenv.New(t, testenv.Options{})
	ch := channel(t, mp, func(c *email.Config) { c.Rate, c.RecipientPerMinute = 50, 600 })
	w := startEngine(t, env, ch)

	n := notification("order:E1:accepted", ann)
	publish(t, env, n, n.Key)
	msgs := mp.WaitForMessages(1, wait)
	if len(msgs) != 1 || msgs[0].MessageID != email.MessageID(n.Key, "shop.test") || msgs[0].Subject != "Order A1 accepted" {
		t.Fatalf("got %+v, want one message with the key's Message-ID", msgs)
	}
	natstest.WaitFor(t, wait, func() bool { return w.Stats().Sent == 1 }, "the delivery recorded")

	// The same key again under another message id (a replay past the
	// stream's duplicate window): the delivery record stops it.
	publish(t, env, n, n.Key+":replay")
	natstest.WaitFor(t, wait, func() bool { return w.Stats().AlreadyDelivered == 1 }, "the replay acked as already delivered")
	if got := mp.Messages(); len(got) != 1 {
		t.Errorf("Mailpit has %d messages after the replay, want 1", len(got))
	}
	if s := w.Stats(); s.Sent != 1 || s.DeadLetters != 0 {
		t.Errorf("got sent %d, dead letters %d; want 1 and 0", s.Sent, s.DeadLetters)
	}
}

func TestEngineDeadLettersAHardBounce(t *testing.T) {
	mp := mailpittest.Start(t, mailpittest.Options{AllowedRecipients: `@example\.com$`})
	env := testenv.New(t, testenv.Options{})
	ch := channel(t, mp, func(c *email.Config) { c.Rate, c.RecipientPerMinute = 50, 600 })
	w := startEngine(t, env, ch)

	n := notification("order:E2:accepted", "bob@elsewhere.test")
	publish(t, env, n, n.Key)
	natstest.WaitFor(t, wait, func() bool { return len(env.DeadLetters()) == 1 }, "the dead letter")
	dl := env.DeadLetters()[0]
	token, _ := n.Recipient(notify.ChannelEmail)
	if got, want := dl.Subject, jetstream.DeadLetterSubject(email.Name, email.ReasonHardBounce, token); got != want {
		t.Errorf("got dead-letter subject %q, want %q", got, want)
	}
	if got := dl.Header.Get(jetstream.HeaderReason); got != email.ReasonHardBounce {
		t.Errorf("got reason %q, want %s", got, email.ReasonHardBounce)
	}
	if got := dl.Header.Get(jetstream.HeaderErrorCode); got != "550" {
		t.Errorf("got code %q, want 550", got)
	}
	noAddress(t, "the dead letter's description", dl.Header.Get(jetstream.HeaderErrorDescription))
	natstest.WaitFor(t, wait, func() bool { return w.Stats().DeadRecipients == 1 }, "the recipient remembered as dead")
	if got := mp.Messages(); len(got) != 0 {
		t.Errorf("Mailpit has %d messages, want 0", len(got))
	}
}
