package max_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	maxchannel "github.com/tgnotify/tgnotify/pkg/channel/max"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// maxWorker is a delivery engine driving the MAX channel, in-process.
type maxWorker struct {
	*delivery.Worker
	res *jetstream.WorkerResources
}

// provisionMAX creates what a MAX worker pulls from and writes to, as
// jetstream.ProvisionWorker does for Telegram: the durable pull consumer
// max-worker on NOTIFY (filter notify.max.>, explicit acks, pinned priority
// group max) and the three buckets.
func provisionMAX(t *testing.T, js natsjs.JetStream, ackWait time.Duration) *jetstream.WorkerResources {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settings := jetstream.WorkerSettings{AckWait: ackWait, MaxAckPending: 10_000, PinnedTTL: 2 * time.Second}
	cons, err := js.CreateOrUpdateConsumer(ctx, jetstream.StreamNotify, natsjs.ConsumerConfig{
		Durable:        maxchannel.Name + "-worker",
		Description:    "tgnotify max worker",
		FilterSubject:  jetstream.Subject(maxchannel.Name, ">"),
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckPolicy:      natsjs.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxDeliver:     -1,
		MaxAckPending:  settings.MaxAckPending,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{maxchannel.Name},
		PinnedTTL:      settings.PinnedTTL,
	})
	if err != nil {
		t.Fatalf("creating the max-worker consumer: %v", err)
	}
	res := &jetstream.WorkerResources{Consumer: cons}
	var kvs []natsjs.KeyValue
	for _, cfg := range jetstream.WorkerBucketConfigs(settings) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			t.Fatalf("creating bucket %s: %v", cfg.Bucket, err)
		}
		kvs = append(kvs, kv)
	}
	res.Delivered, res.Chats, res.Attempts = kvs[0], kvs[1], kvs[2]
	return res
}

// startMAXWorker runs the delivery engine with the MAX channel against the
// emulator at url until the end of the test.
func startMAXWorker(t *testing.T, env *testenv.Env, url string) *maxWorker {
	t.Helper()
	const ackWait = 5 * time.Second
	res := provisionMAX(t, env.JS, ackWait)
	client, err := maxapi.New(token, maxapi.WithBaseURL(url), maxapi.WithTimeout(5*time.Second), maxapi.WithLogger(env.Log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	// MAX's rates scaled up so the test runs in seconds; the emulator's
	// bucket is off, so only the pauses it is told to open limit it.
	ch, err := maxchannel.New(maxchannel.Config{Rate: 300, UserRate: 20, ChatPerMinute: 1200}, client)
	if err != nil {
		t.Fatal(err)
	}
	w, err := delivery.New(
		delivery.Config{AckWait: ackWait, BackoffBase: 50 * time.Millisecond, BackoffCap: 500 * time.Millisecond, StatsInterval: 200 * time.Millisecond},
		delivery.Deps{JS: env.JS, Resources: res, Channel: ch, Logger: env.Log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("delivery.New: %v", err)
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
			t.Errorf("the worker did not stop within 30s")
		}
	})
	natstest.WaitFor(t, 10*time.Second, func() bool { return w.Ready() == nil }, "the max worker ready")
	return &maxWorker{Worker: w, res: res}
}

// publish puts a MAX notification on notify.max.<recipient>, as the
// publisher would.
func publish(t *testing.T, env *testenv.Env, n notify.Notification) {
	t.Helper()
	n.CreatedAt = time.Now().UTC()
	payload, err := n.MarshalPayload()
	if err != nil {
		t.Fatalf("encoding %s: %v", n.Key, err)
	}
	recipient, err := n.Recipient(notify.ChannelMax)
	if err != nil {
		t.Fatal(err)
	}
	msg := jetstream.Msg(jetstream.Subject(maxchannel.Name, recipient), n.Key, n.CreatedAt, notify.PayloadContentType, payload)
	if _, err := env.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatalf("publishing %s: %v", n.Key, err)
	}
}

// TestEngineDeliversThroughMAX runs the real delivery engine with the MAX
// channel against the emulator over real HTTP, with JetStream embedded:
// a notification is delivered once and recorded, a user who stopped the
// bot is dead-lettered and remembered, and a 429 pauses every send.
func TestEngineDeliversThroughMAX(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	emu, err := emulator.New(emulator.Config{
		Token:  token,
		States: map[emulator.Recipient]emulator.RecipientState{emulator.User(13): emulator.StateBlocked},
		Logger: env.Log,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	w := startMAXWorker(t, env, srv.URL)
	ctx := context.Background()

	t.Run("delivered once", func(t *testing.T) {
		publish(t, env, notify.Notification{Key: "order:A1:accepted", MaxUserID: 42, ParseMode: notify.ParseModeHTML,
			Text: "<b>Order A1</b> accepted"})
		// The same key again (a republish past the stream's duplicate
		// window has another message id): the delivery record stops it.
		n := notify.Notification{Key: "order:A1:accepted", MaxUserID: 42, ParseMode: notify.ParseModeHTML, Text: "<b>Order A1</b> accepted"}
		n.CreatedAt = time.Now().UTC()
		payload, err := n.MarshalPayload()
		if err != nil {
			t.Fatal(err)
		}
		again := jetstream.Msg(jetstream.Subject("max", "u42"), "republished:order:A1:accepted", n.CreatedAt, notify.PayloadContentType, payload)
		again.Header.Set(jetstream.HeaderKey, n.Key)
		if _, err := env.JS.PublishMsg(ctx, again); err != nil {
			t.Fatal(err)
		}
		publish(t, env, notify.Notification{Key: "order:A1:shipped", MaxUserID: 42, Text: "Order A1 shipped"})
		natstest.WaitFor(t, 20*time.Second, func() bool {
			return len(emu.RecipientMessages(emulator.User(42))) >= 2 && w.Stats().AlreadyDelivered >= 1
		},
			"both messages delivered and the repeat acked")
		ms := emu.RecipientMessages(emulator.User(42))
		if len(ms) != 2 || ms[0].Text != "<b>Order A1</b> accepted" || ms[0].Format != "html" || ms[1].Text != "Order A1 shipped" {
			t.Fatalf("user 42 received %+v, want each notification once, in order", ms)
		}
		entry, err := w.res.Delivered.Get(ctx, delivery.RecordKey("order:A1:accepted"))
		if err != nil {
			t.Fatalf("reading the delivery record: %v", err)
		}
		if !strings.Contains(string(entry.Value()), ms[0].MessageID) {
			t.Errorf("delivery record %s does not name the mid %s", entry.Value(), ms[0].MessageID)
		}
	})

	t.Run("a blocked user is dead-lettered", func(t *testing.T) {
		publish(t, env, notify.Notification{Key: "order:B1:accepted", MaxUserID: 13, Text: "Order B1 accepted"})
		publish(t, env, notify.Notification{Key: "order:B1:shipped", MaxUserID: 13, Text: "Order B1 shipped"})
		var dead []*natsjs.RawStreamMsg
		natstest.WaitFor(t, 20*time.Second, func() bool {
			dead = nil
			for _, m := range env.DeadLetters() {
				if m.Subject == "dead.notify.max.blocked.u13" {
					dead = append(dead, m)
				}
			}
			return len(dead) == 2
		}, "both messages to the blocked user dead-lettered")
		first := dead[0].Header
		if first.Get(jetstream.HeaderReason) != "blocked" || first.Get(jetstream.HeaderErrorCode) != "403" ||
			!strings.Contains(first.Get(jetstream.HeaderErrorDescription), "chat.denied: error.dialog.suspended") ||
			first.Get(jetstream.HeaderKey) != "order:B1:accepted" {
			t.Errorf("dead letter headers %v, want reason blocked, code 403, MAX's code and message", first)
		}
		if got := dead[1].Header.Get(jetstream.HeaderReason); got != "blocked" {
			t.Errorf("second dead letter's reason %q, want blocked (the remembered dead recipient)", got)
		}
		if n := emu.Stats().ByCode[403]; n != 1 {
			t.Errorf("the emulator answered %d 403s, want 1: the second message costs no request", n)
		}
		if len(emu.RecipientMessages(emulator.User(13))) != 0 {
			t.Error("the blocked user received a message")
		}
	})

	t.Run("a 429 pauses every send", func(t *testing.T) {
		before := emu.Stats()
		if err := emu.OpenPause(emulator.PauseRequest{RetryAfter: 2}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, u := range []int64{100, 200, 300} {
			publish(t, env, notify.Notification{Key: fmt.Sprintf("order:P%d:accepted", u), MaxUserID: u, Text: "paused"})
		}
		natstest.WaitFor(t, 20*time.Second, func() bool { return emu.Stats().Delivered >= before.Delivered+3 }, "the three messages delivered")
		st, s := emu.Stats(), w.Stats()
		// Every request the emulator decided inside the pause was admitted
		// before the worker read the 429; none started after it.
		if inPause := st.InPause - before.InPause; inPause > s.Crossing429 {
			t.Errorf("the emulator decided %d requests inside the pause, the worker admitted only %d before reading the 429", inPause, s.Crossing429)
		}
		if limited := st.RateLimited - before.RateLimited; limited < 1 || limited != s.RateLimited {
			t.Errorf("the emulator answered %d 429s, the worker counted %d; want the same, at least 1", limited, s.RateLimited)
		}
		// The arrival clock cannot tell a request launched after the 429
		// from one admitted before it that a busy machine delivered late,
		// so it is bounded by the same count.
		if sent := st.SentInPause - before.SentInPause; sent > s.Crossing429 {
			t.Errorf("%d requests arrived after the worker could have read the 429, more than the %d admitted before it", sent, s.Crossing429)
		}
		for _, u := range []int64{100, 200, 300} {
			for _, m := range emu.RecipientMessages(emulator.User(u)) {
				if d := m.Time.Sub(start); d < 2*time.Second {
					t.Errorf("message to u%d delivered %v after the pause opened, inside its 2s", u, d)
				}
			}
		}
		if s.Retries.Level1 != 0 {
			t.Errorf("worker stats %+v: want no retry charged for a 429", s)
		}
	})
}
