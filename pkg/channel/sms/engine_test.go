package sms_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/channel/sms"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/twilio"
	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// The names the SMS worker uses (docs/DEVELOPING.md, "Shared names").
const (
	consumerSMS      = "sms-worker"
	filterSMS        = "notify.sms.>"
	priorityGroupSMS = "sms"
)

// provisionSMSWorker creates what jetstream.ProvisionWorker creates for
// Telegram, for the SMS channel: the durable pull consumer sms-worker on
// NOTIFY (filter notify.sms.>, explicit acks, pinned priority group sms)
// and the three buckets.
func provisionSMSWorker(t *testing.T, js natsjs.JetStream) *jetstream.WorkerResources {
	t.Helper()
	ctx := context.Background()
	settings := jetstream.WorkerSettings{AckWait: 5 * time.Second, PinnedTTL: 2 * time.Second, MaxAckPending: 1000}
	cc := jetstream.WorkerConsumerConfig(settings)
	cc.Durable, cc.Description, cc.FilterSubject, cc.PriorityGroups = consumerSMS, "tgnotify sms worker", filterSMS, []string{priorityGroupSMS}
	cons, err := js.CreateOrUpdateConsumer(ctx, jetstream.StreamNotify, cc)
	if err != nil {
		t.Fatalf("creating the consumer: %v", err)
	}
	res := &jetstream.WorkerResources{Consumer: cons}
	for _, cfg := range jetstream.WorkerBucketConfigs(settings) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			t.Fatalf("creating bucket %s: %v", cfg.Bucket, err)
		}
		switch cfg.Bucket {
		case jetstream.BucketDelivered:
			res.Delivered = kv
		case jetstream.BucketChats:
			res.Chats = kv
		case jetstream.BucketAttempts:
			res.Attempts = kv
		}
	}
	return res
}

// publish puts n on its SMS subject, as the publisher would.
func publish(t *testing.T, js natsjs.JetStream, ch *sms.Channel, n notify.Notification) string {
	t.Helper()
	token, err := ch.Recipient(n)
	if err != nil {
		t.Fatal(err)
	}
	n.CreatedAt = time.Now().UTC()
	payload, err := n.MarshalPayload()
	if err != nil {
		t.Fatalf("encoding %s: %v", n.Key, err)
	}
	if _, err := js.PublishMsg(context.Background(), jetstream.Msg(jetstream.Subject(sms.Name, token), n.Key, n.CreatedAt, notify.PayloadContentType, payload)); err != nil {
		t.Fatalf("publishing %s: %v", n.Key, err)
	}
	return token
}

// The real delivery engine drives the SMS channel from JetStream to the
// emulator: a notification is sent once, shortened; one to an invalid
// number is dead-lettered as a dead recipient, which is remembered.
func TestEngineDeliversBySMS(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	emu, err := emulator.New(emulator.Config{
		AccountSID: accountSID,
		AuthToken:  authToken,
		Limits:     emulator.DefaultLimits(),
		Numbers:    map[string]emulator.NumberState{"+15005550001": emulator.NumberInvalid},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := twilio.New(accountSID, authToken, twilio.WithBaseURL(srv.URL), twilio.WithFrom(sender), twilio.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	// A short code's 100 segments a second: the test need not wait for a
	// long code's pace.
	ch, err := sms.New(sms.Config{SegmentsPerSecond: 100}, client, logger)
	if err != nil {
		t.Fatal(err)
	}

	res := provisionSMSWorker(t, env.JS)
	w, err := delivery.New(delivery.Config{AckWait: 5 * time.Second, StatsInterval: 200 * time.Millisecond},
		delivery.Deps{JS: env.JS, Resources: res, Channel: ch, Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker Run returned %v, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop within 30s")
		}
		assertClean(t, "the logs", logs.String())
	})
	natstest.WaitFor(t, 10*time.Second, func() bool { return w.Ready() == nil }, "worker ready")

	long := notify.Notification{
		Key:       "order:A1:accepted",
		Phone:     phone,
		Route:     []notify.Channel{notify.ChannelSMS},
		ParseMode: notify.ParseModeHTML,
		Text: "<b>Order A1 accepted</b>\nHello, Ann! We have received your order:\n" +
			strings.Repeat("• Green tea, 100 g × 2 — 7.00\n", 20) +
			"<b>Total: 140.00</b>\n<a href=\"https://shop.example/orders/A1\">Track your order</a>",
	}
	invalid := notify.Notification{Key: "order:B2:accepted", Phone: "+15005550001", Route: []notify.Channel{notify.ChannelSMS}, Text: "Order B2 accepted"}
	publish(t, env.JS, ch, long)
	deadToken := publish(t, env.JS, ch, invalid)

	natstest.WaitFor(t, 20*time.Second, func() bool {
		return len(emu.MessagesTo(phone)) == 1 && len(env.DeadLetters()) == 1
	}, "one SMS and one dead letter")

	m := emu.MessagesTo(phone)[0]
	if m.Body != ch.Text(long) || m.NumSegments > sms.DefaultMaxSegments || m.Encoding != "GSM-7" ||
		!strings.HasPrefix(m.Body, "Order A1 accepted\n") || !strings.HasSuffix(m.Body, "...\nhttps://shop.example/orders/A1") {
		t.Errorf("the emulator received %d segments (%s): %q", m.NumSegments, m.Encoding, m.Body)
	}
	if n := len(emu.MessagesTo("+15005550001")); n != 0 {
		t.Errorf("%d messages created for the invalid number", n)
	}

	dl := env.DeadLetters()[0]
	if want := jetstream.DeadLetterSubject(sms.Name, "invalid_number", deadToken); dl.Subject != want {
		t.Errorf("dead letter on %s, want %s", dl.Subject, want)
	}
	if r, c := dl.Header.Get(jetstream.HeaderReason), dl.Header.Get(jetstream.HeaderErrorCode); r != "invalid_number" || c != "21211" {
		t.Errorf("dead letter reason %q code %q, want invalid_number 21211", r, c)
	}
	if d := dl.Header.Get(jetstream.HeaderErrorDescription); !strings.Contains(d, "+***01") {
		t.Errorf("dead letter description %q, want Twilio's message with the number masked", d)
	}
	assertClean(t, "the dead letter's description", dl.Header.Get(jetstream.HeaderErrorDescription))

	// The dead recipient is remembered, and the delivery recorded.
	natstest.WaitFor(t, 10*time.Second, func() bool {
		_, err := res.Chats.Get(context.Background(), sms.Name+".dead."+deadToken)
		return err == nil
	}, "the dead recipient to be remembered")
	// The send's claim is replaced by the delivery record after the
	// message was created: wait for the record, not for the claim.
	var rec delivery.DeliveryRecord
	natstest.WaitFor(t, 10*time.Second, func() bool {
		entry, err := res.Delivered.Get(context.Background(), delivery.RecordKey(long.Key))
		if err != nil {
			return false
		}
		rec = delivery.DeliveryRecord{}
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			t.Fatalf("the delivery record of %s: %v", long.Key, err)
		}
		return rec.State == ""
	}, "the delivery record of "+long.Key)
	if rec.ProviderID != m.SID || rec.Recipient != "p"+notify.HashAddress(phone) {
		t.Errorf("delivery record %+v, want the message sid %s and the recipient's token", rec, m.SID)
	}
	if s := emu.Stats(); s.Created != 1 || s.ByErrorCode[21211] != 1 {
		t.Errorf("emulator stats %+v, want one message created and one 21211", s)
	}
}
