package delivery

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// ackedMsg is a delivery that records its ack.
type ackedMsg struct {
	replier
	acked atomic.Bool
}

func (m *ackedMsg) Ack() error { m.acked.Store(true); return nil }

// A redelivery of a notification this process delivered is never sent
// again, and is acked only once its delivered event is stored: acked at
// once, as it was, the message was gone while the first attempt's event
// still waited to be stored, and a worker killed then lost the event for
// good (the long cluster chaos run: 14 delivered orders without one).
// While the delivery record is not in the bucket yet, the job waits.
func TestRedeliveryOfADeliveryOfThisProcessWaitsForItsEvent(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	var failures atomic.Int64
	e := newEvents(s.js, jetstream.DefaultNames(), "telegram", slog.New(slog.DiscardHandler), func() { failures.Add(1) }, func(int) {})
	go e.run()
	t.Cleanup(func() { e.close(time.Second) })
	m, err := newMetrics(prometheus.NewRegistry(), "telegram")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{store: s, events: e, m: m, log: slog.New(slog.DiscardHandler), now: time.Now}
	const key = "order:5:accepted"
	msg := &ackedMsg{}
	j := &job{reply: msg, delivered: 2, seq: 9, n: notify.Notification{Key: key, ChatID: 100}, lane: "100"}

	// Delivered here, its record still being written: the redelivery
	// waits, unsent and unacked.
	s.remember(key)
	if r := w.deliveredHere(ctx, j, time.Now()); r.disp != retryHere || r.delay <= 0 || msg.acked.Load() {
		t.Fatalf("before the record is stored: disposition %v, delay %v, acked %v; want a retry later, not acked", r.disp, r.delay, msg.acked.Load())
	}

	// The record is stored, the events' stream does not answer: the
	// delivered event is told again, and the ack waits for it.
	putRecord(t, s, DeliveryRecord{Key: key, Channel: "telegram", Recipient: "100", ProviderID: "7", DeliveredAt: time.Now().UTC(), StreamSeq: 9})
	if err := s.js.DeleteStream(ctx, jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	if r := w.deliveredHere(ctx, j, time.Now()); r.disp != moveOn {
		t.Fatalf("with the record stored: disposition %v, want moveOn", r.disp)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return failures.Load() >= 2 }, "the event refused twice")
	if msg.acked.Load() {
		t.Fatal("acked while its delivered event was not stored")
	}
	if err := jetstream.ProvisionStreams(ctx, s.js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 15*time.Second, msg.acked.Load, "the ack once the event is stored")
	if n := storedEvents(t, s.js, jetstream.SubjectDelivered); n != 1 {
		t.Errorf("%d delivered events stored, want 1", n)
	}
}

