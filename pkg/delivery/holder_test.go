package delivery_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// putEntry writes a notify_delivered entry as another worker would.
func putEntry(t *testing.T, kv natsjs.KeyValue, r delivery.DeliveryRecord) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), delivery.RecordKey(r.Key), b); err != nil {
		t.Fatal(err)
	}
}

// answer makes the test answer on a worker id's live subject, as a live
// worker does; the returned subscription's end is that worker's death.
func answer(t *testing.T, nc *nats.Conn, id string) *nats.Subscription {
	t.Helper()
	sub, err := nc.Subscribe(jetstream.DefaultNames().LiveSubject("telegram", id), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// A message whose notification another live worker has claimed is not
// sent: the worker waits for the other's record, and acks the message as
// already delivered when it comes; it sends once the claiming worker is
// gone. A claim whose worker is gone already is taken over at once.
func TestAClaimOfALiveWorkerHoldsTheSendOff(t *testing.T) {
	t.Parallel()
	lim, cfg, tg := fastLimits()
	env := testenv.New(t, testenv.Options{Emulator: emulator.Config{Limits: lim}})
	ctx := context.Background()
	env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg}).Stop(t) // provisions the consumer and buckets
	kv, err := env.JS.KeyValue(ctx, jetstream.DefaultNames().BucketDelivered)
	if err != nil {
		t.Fatal(err)
	}
	nc := env.JS.Conn()
	now := time.Now().UTC()
	claim := func(key string, chat, by string) delivery.DeliveryRecord {
		return delivery.DeliveryRecord{Key: key, Channel: "telegram", Recipient: chat, State: delivery.StateSending,
			StreamSeq: 1, ClaimedAt: now, ClaimedBy: by}
	}
	answer(t, nc, "recorder")
	dying := answer(t, nc, "dying")
	putEntry(t, kv, claim("order:H1:accepted", "100", "recorder")) // alive, and writes its record
	putEntry(t, kv, claim("order:H2:accepted", "101", "gone"))     // no longer answers
	putEntry(t, kv, claim("order:H3:accepted", "102", "dying"))    // alive, then dies
	env.Publish(note("order:H1:accepted", 100, "H1"))
	env.Publish(note("order:H2:accepted", 101, "H2"))
	env.Publish(note("order:H3:accepted", 102, "H3"))
	w := env.StartWorker(testenv.WorkerOptions{Config: cfg, Telegram: tg})

	natstest.WaitFor(t, 15*time.Second, func() bool { return len(env.Emu.ChatMessages(101)) == 1 }, "H2 sent over the claim of a worker that is gone")
	natstest.WaitFor(t, 15*time.Second, func() bool { return metricValue(t, w, "tgnotify_worker_held_off_total") >= 4 },
		"H1 and H3 held off, twice each")
	if n, m := len(env.Emu.ChatMessages(100)), len(env.Emu.ChatMessages(102)); n != 0 || m != 0 {
		t.Fatalf("sent %d of H1 and %d of H3 while live workers' claims were fresh, want none", n, m)
	}

	// The claiming worker's record comes: H1 is acked without a request.
	putEntry(t, kv, delivery.DeliveryRecord{Key: "order:H1:accepted", Channel: "telegram", Recipient: "100", ProviderID: "9",
		DeliveredAt: time.Now().UTC(), StreamSeq: 1})
	natstest.WaitFor(t, 15*time.Second, func() bool { return metricValue(t, w, "tgnotify_worker_already_delivered_total") == 1 },
		"H1 acked as delivered by the other worker")
	// The other claiming worker dies: H3 is sent.
	if err := dying.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 15*time.Second, func() bool { return len(env.Emu.ChatMessages(102)) == 1 }, "H3 sent once its claiming worker is gone")
	if n := len(env.Emu.ChatMessages(100)); n != 0 {
		t.Fatalf("H1 sent %d times, want never (the other worker delivered it)", n)
	}
	natstest.WaitFor(t, 15*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 3 }, "three delivered events")
}
