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

// While a worker settles after its reconnect to NATS, it neither sends nor
// gives up on a notification past its fallback_after that another worker
// claimed: that worker may have delivered it and cannot write the record,
// or answer for its claim, before its own connection is back. Given up on
// then, the notification moved to the next channel, which would send it
// again unless the record landed first (bug 31, the long chaos run: six
// notifications handed on 0.5 s after the standby's reconnect).
func TestNoGiveUpWhileSettlingAfterAReconnect(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	m, err := newMetrics(prometheus.NewRegistry(), "telegram")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{
		cfg: Config{FallbackTransactional: 12 * time.Second, MaxRequestTimeout: 4 * time.Second}, name: "telegram",
		js: s.js, names: jetstream.DefaultNames(), store: s, m: m, log: slog.New(slog.DiscardHandler), now: time.Now,
		id: newWorkerID(), adm: newAdmission("settling", 1000, time.Minute, nil),
	}
	s.state = newSharedState(nil, "telegram", w.log, nil)
	const key = "order:7:accepted"
	// The other worker's claim: it sent the notification; its connection,
	// and so its answer for the claim, is not back yet.
	s.worker = "other-worker"
	if c, err := s.claim(ctx, key, "100", 9); err != nil || c.rev == 0 {
		t.Fatalf("the other worker's claim = %+v, %v", c, err)
	}
	now := time.Now()
	j := &job{
		n:   notify.Notification{Key: key, ChatID: 100, Route: []notify.Channel{notify.ChannelTelegram, notify.ChannelEmail}, Email: "a@example.com"},
		seq: 9, delivered: 1, lane: "100", since: now.Add(-time.Minute),
	}
	w.adm.settleFor(now.Add(ReconnectSettle), settleCause{reconnects: 1})

	if w.due(now)(j) {
		t.Fatal("due while settling: the sweep would give it up")
	}
	if r := w.attempt(ctx, j, "100"); r.disp != retryHere || r.delay <= 0 || r.delay > ReconnectSettle {
		t.Fatalf("attempt while settling: disposition %v, delay %v; want it back within the settle (%v)", r.disp, r.delay, ReconnectSettle)
	}
	if !w.due(now.Add(ReconnectSettle))(j) {
		t.Fatal("not due once settled: its fallback deadline passed a minute ago")
	}
	info, err := s.js.Stream(ctx, jetstream.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// A send whose claim cannot be written (notify_delivered serves reads but
// takes no write: its leader is being elected) waits for the claim, sends
// nothing, and tries again within claimRetry, not a second later: a
// second lost after every election of the bucket.
func TestSendWhoseClaimCannotBeWrittenTriesAgainSoon(t *testing.T) {
	s := recordStore(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "telegram")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{
		cfg: Config{FallbackTransactional: 12 * time.Second, MaxRequestTimeout: 4 * time.Second, MaxAttempts: 5}, name: "telegram",
		js: s.js, names: jetstream.DefaultNames(), store: s, m: m, log: slog.New(slog.DiscardHandler), now: time.Now,
		id: newWorkerID(), adm: newAdmission("claim", 1000, time.Minute, nil),
	}
	w.records = newRecorder(s, true, w.log, func(int) {}, func() {})
	s.state = newSharedState(nil, "telegram", w.log, nil)
	// Reads are served, writes refused: a sealed stream answers as a
	// bucket without a leader does for the claim, at once and with an error.
	st, err := s.js.Stream(ctx, s.deliveredSubjects.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sealed = true
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	j := &job{
		n:   notify.Notification{Key: "order:8:accepted", ChatID: 100, Route: []notify.Channel{notify.ChannelTelegram}},
		seq: 9, delivered: 1, lane: "100", since: time.Now(),
	}
	r := w.attempt(ctx, j, "100")
	if r.disp != retryHere || r.delay != claimRetry || r.called {
		t.Fatalf("attempt without a claim: disposition %v, delay %v, request made %v; want a retry in %v and no request", r.disp, r.delay, r.called, claimRetry)
	}
	if waits := gatheredCounter(t, reg, "tgnotify_worker_claim_waits_total"); waits != 1 {
		t.Fatalf("claim_waits_total = %v, want 1", waits)
	}
}
