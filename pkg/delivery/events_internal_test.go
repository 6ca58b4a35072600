package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// eventsEnv is a NATS server with the NOTIFY stream and an events publisher
// on a connection that reconnects.
func eventsEnv(t *testing.T) (*natstest.Server, natsjs.JetStream, *events, *atomic.Int64) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err := jetstream.ProvisionStreams(context.Background(), js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int64
	e := newEvents(js, jetstream.DefaultNames(), "telegram", slog.New(slog.NewTextHandler(io.Discard, nil)), func() { failures.Add(1) }, func(int) {})
	go e.run()
	return srv, js, e, &failures
}

func storedEvents(t *testing.T, js natsjs.JetStream, subject string) int {
	t.Helper()
	s, err := js.Stream(context.Background(), jetstream.StreamNotify)
	if err != nil {
		return -1
	}
	info, err := s.Info(context.Background(), natsjs.WithSubjectFilter(subject))
	if err != nil {
		return -1
	}
	return int(info.State.Subjects[subject])
}

// An event published while NATS is down waits, and is stored once NATS is
// back; the worker's close then finds nothing outstanding.
func TestEventWaitsForNATS(t *testing.T) {
	srv, js, e, _ := eventsEnv(t)
	srv.Shutdown()
	natstest.WaitFor(t, 5*time.Second, func() bool { return !js.Conn().IsConnected() }, "the connection down")
	var acked atomic.Bool
	e.delivered("order:1:accepted", "telegram", "100", "7", time.Now(), func() { acked.Store(true) })
	if n := e.pending.Load(); n != 1 {
		t.Fatalf("%d events pending, want 1", n)
	}
	if acked.Load() {
		t.Fatal("the message was acked before its delivered event was stored")
	}
	srv.Start(t)
	natstest.WaitFor(t, 15*time.Second, func() bool { return storedEvents(t, js, jetstream.SubjectDelivered) == 1 }, "the event stored after the restart")
	natstest.WaitFor(t, 5*time.Second, acked.Load, "the ack once the event is stored")
	natstest.WaitFor(t, 5*time.Second, func() bool { return e.pending.Load() == 0 }, "nothing pending")
	e.close(time.Second)
}

// An event the stream refuses (here: no stream listens, as during a
// stream's election or re-creation) is published again until it is
// stored, and stored once.
func TestRefusedEventIsPublishedAgain(t *testing.T) {
	_, js, e, failures := eventsEnv(t)
	ctx := context.Background()
	if err := js.DeleteStream(ctx, jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	e.dead(&job{n: notify.Notification{Key: "order:2:accepted", ChatID: 100}, lane: "100"}, letter{reason: ReasonMaxAttempts}, time.Now())
	natstest.WaitFor(t, 10*time.Second, func() bool { return failures.Load() >= 2 }, "the event refused twice")
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 15*time.Second, func() bool { return storedEvents(t, js, jetstream.SubjectDead) == 1 }, "the event stored once the stream is back")
	natstest.WaitFor(t, 5*time.Second, func() bool { return e.pending.Load() == 0 }, "nothing pending")
	e.close(time.Second)
	if n := storedEvents(t, js, jetstream.SubjectDead); n != 1 {
		t.Fatalf("%d dead events stored, want 1", n)
	}
}

// lostAckJS loses the PubAck of its first lose async publishes: the
// message is not stored and the future never resolves, as when a
// clustered stream's leader steps down or dies with the publish in flight
// while the connection stays up.
type lostAckJS struct {
	natsjs.JetStream
	lose atomic.Int32
}

func (j *lostAckJS) PublishMsgAsync(m *nats.Msg, opts ...natsjs.PublishOpt) (natsjs.PubAckFuture, error) {
	if j.lose.Add(-1) >= 0 {
		return unansweredFuture{m}, nil
	}
	return j.JetStream.PublishMsgAsync(m, opts...)
}

// unansweredFuture is a PubAck that never comes.
type unansweredFuture struct{ msg *nats.Msg }

func (f unansweredFuture) Ok() <-chan *natsjs.PubAck { return nil }
func (f unansweredFuture) Err() <-chan error         { return nil }
func (f unansweredFuture) Msg() *nats.Msg            { return f.msg }

// An event whose PubAck never comes (lost in a stream leader's election,
// the connection up all along) is published again and stored; the events
// after it are confirmed too, instead of waiting behind it for ever (found
// by the demo on a three-node cluster: a step-down left 52 delivered
// orders without their event and 213 events unconfirmed at shutdown).
func TestUnansweredEventIsPublishedAgain(t *testing.T) {
	_, js, _, _ := eventsEnv(t)
	lossy := &lostAckJS{JetStream: js}
	lossy.lose.Store(3)
	var failures atomic.Int64
	e := newEvents(lossy, jetstream.DefaultNames(), "telegram", slog.New(slog.NewTextHandler(io.Discard, nil)), func() { failures.Add(1) }, func(int) {})
	go e.run()
	for i := range 5 {
		e.delivered(fmt.Sprintf("order:%d:accepted", i), "telegram", "100", "7", time.Now(), nil)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return storedEvents(t, js, jetstream.SubjectDelivered) == 5 }, "every event stored")
	natstest.WaitFor(t, 10*time.Second, func() bool { return e.pending.Load() == 0 }, "nothing pending")
	e.close(time.Second)
	if n := failures.Load(); n < 3 {
		t.Errorf("%d failures counted, want at least the 3 unanswered publishes", n)
	}
}

// batchedEvents is an events publisher on a fresh server, started (it knows
// NOTIFY takes atomic batches) but not running: what is published queues.
func batchedEvents(t *testing.T) (natsjs.JetStream, *events, *[]int) {
	t.Helper()
	_, js, _, _ := eventsEnv(t)
	batches := new([]int)
	e := newEvents(js, jetstream.DefaultNames(), "telegram", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {},
		func(n int) { *batches = append(*batches, n) })
	e.start(context.Background())
	if !e.batches.Load() {
		t.Fatal("NOTIFY as provisioned does not take atomic batches")
	}
	return js, e, batches
}

// Events that wait together are stored as one atomic batch, each once, and
// each event's stored callback runs.
func TestWaitingEventsAreStoredAsOneBatch(t *testing.T) {
	js, e, batches := batchedEvents(t)
	const n = 40
	var acked atomic.Int64
	deliveredEvents(e, 0, n, &acked)
	go e.run()
	natstest.WaitFor(t, 10*time.Second, func() bool { return acked.Load() == n }, "every event's callback")
	e.close(time.Second)
	if len(*batches) != 1 || (*batches)[0] != n {
		t.Fatalf("atomic batches of %v events, want one of %d", *batches, n)
	}
	if got := storedEvents(t, js, jetstream.SubjectDelivered); got != n {
		t.Fatalf("%d events stored, want %d", got, n)
	}
}

// A batch holding an event stored before (a redelivery tells it again) is
// refused by the server as a whole; its events are then published one by
// one, the repeat dropped by its message id, and every callback runs.
func TestABatchWithARepeatedEventIsPublishedOneByOne(t *testing.T) {
	js, e, batches := batchedEvents(t)
	if _, err := js.PublishMsg(context.Background(), mustEventMsg(t, e, "order:0:accepted")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var acked atomic.Int64
	deliveredEvents(e, 0, n, &acked)
	go e.run()
	natstest.WaitFor(t, 10*time.Second, func() bool { return acked.Load() == n }, "every event's callback")
	e.close(time.Second)
	if len(*batches) != 1 {
		t.Fatalf("atomic batches of %v events, want the one refused", *batches)
	}
	if got := storedEvents(t, js, jetstream.SubjectDelivered); got != n {
		t.Fatalf("%d events stored, want %d (the repeat dropped)", got, n)
	}
}

// deliveredEvents queues the delivered events of orders from..to-1, each
// counting in acked once stored.
func deliveredEvents(e *events, from, to int, acked *atomic.Int64) {
	for i := from; i < to; i++ {
		e.delivered(fmt.Sprintf("order:%d:accepted", i), "telegram", "100", "7", time.Now(), func() { acked.Add(1) })
	}
}

// mustEventMsg is the message of the delivered event of key, as e
// publishes it.
func mustEventMsg(t *testing.T, e *events, key string) *nats.Msg {
	t.Helper()
	e.delivered(key, "telegram", "100", "7", time.Now(), nil)
	ev := <-e.queue
	e.pending.Add(-1)
	return ev.msg
}

// asyncCountingJS counts the events published one by one.
type asyncCountingJS struct {
	natsjs.JetStream
	async atomic.Int64
}

func (j *asyncCountingJS) PublishMsgAsync(m *nats.Msg, opts ...natsjs.PublishOpt) (natsjs.PubAckFuture, error) {
	j.async.Add(1)
	return j.JetStream.PublishMsgAsync(m, opts...)
}

// Events that wait while their stream has no leader (here it does not
// exist: the same "no responders") are published again as one batch every
// leaderlessRetry, never one by one, and stored once each as soon as the
// stream answers. They used to fall back to one-by-one publishing, each
// event with a backoff of its own doubling to 5 s: after a 4–9 s election
// the application heard of deliveries, and the worker acked them, seconds
// after the new leader.
func TestEventsWaitingForALeaderGoAsOneBatch(t *testing.T) {
	_, js, _, _ := eventsEnv(t)
	ctx := context.Background()
	counting := &asyncCountingJS{JetStream: js}
	var attempts, largest atomic.Int64
	e := newEvents(counting, jetstream.DefaultNames(), "telegram", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {},
		func(n int) {
			attempts.Add(1)
			if int64(n) > largest.Load() {
				largest.Store(int64(n))
			}
		})
	e.start(ctx)
	if !e.batches.Load() {
		t.Fatal("NOTIFY as provisioned does not take atomic batches")
	}
	if err := js.DeleteStream(ctx, jetstream.StreamNotify); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var acked atomic.Int64
	deliveredEvents(e, 0, n, &acked)
	go e.run()
	natstest.WaitFor(t, 30*time.Second, func() bool { return attempts.Load() >= 3 }, "the batch refused three times")
	deliveredEvents(e, n, n+5, &acked) // events that come meanwhile join the batch
	natstest.WaitFor(t, 30*time.Second, func() bool { return largest.Load() == n+5 }, "the later events in the batch")
	if k := counting.async.Load(); k != 0 {
		t.Errorf("%d events published one by one while the stream had no leader, want 0", k)
	}
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() bool { return acked.Load() == n+5 }, "every event's callback once the stream is back")
	e.close(time.Second)
	if got := storedEvents(t, js, jetstream.SubjectDelivered); got != n+5 {
		t.Errorf("%d events stored, want %d", got, n+5)
	}
}

// A batch cut short — its stream got a leader while it was being sent, and
// refused the commit of a batch whose beginning it never saw — is sent
// again whole at once, not one event at a time (found by CI: the stream
// came back in the middle of a batch, and every waiting event went one by
// one). Cut short more than maxBatchCutShort times in a row, the events go
// one by one, and are stored all the same.
func TestBatchCutShortIsSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cuts    int
		byOne   bool
		refusal error
	}{
		{"after an election", 1, false, &natsjs.APIError{Code: 400, ErrorCode: jetstreamext.JSErrCodeBatchPublishIncomplete}},
		{"a sequence missing", maxBatchCutShort, false, &natsjs.APIError{Code: 400, ErrorCode: jetstreamext.JSErrCodeBatchPublishMissingSeq}},
		{"cut short again and again", maxBatchCutShort + 1, true, &natsjs.APIError{Code: 400, ErrorCode: jetstreamext.JSErrCodeBatchPublishIncomplete}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js, _, _ := eventsEnv(t)
			counting := &asyncCountingJS{JetStream: js}
			e := newEvents(counting, jetstream.DefaultNames(), "telegram", slog.New(slog.NewTextHandler(io.Discard, nil)), func() {}, func(int) {})
			e.start(context.Background())
			var calls atomic.Int64
			e.atomic = func(ctx context.Context, js natsjs.JetStream, msgs []*nats.Msg) (*jetstreamext.BatchAck, error) {
				switch c := calls.Add(1); {
				case c == 1:
					return nil, nats.ErrNoResponders // no leader yet
				case c <= int64(1+tc.cuts):
					return nil, tc.refusal
				}
				return commitAtomic(ctx, js, msgs)
			}
			const n = 20
			var acked atomic.Int64
			deliveredEvents(e, 0, n, &acked)
			go e.run()
			natstest.WaitFor(t, 30*time.Second, func() bool { return acked.Load() == n }, "every event's callback")
			e.close(time.Second)
			if got := storedEvents(t, js, jetstream.SubjectDelivered); got != n {
				t.Errorf("%d events stored, want %d", got, n)
			}
			if k := counting.async.Load(); tc.byOne != (k > 0) {
				t.Errorf("%d events published one by one after %d cuts, want one by one: %v", k, tc.cuts, tc.byOne)
			}
			if !tc.byOne && calls.Load() != int64(2+tc.cuts) {
				t.Errorf("%d batches sent, want %d", calls.Load(), 2+tc.cuts)
			}
		})
	}
}

// An event refused because its stream has no leader is published again
// after leaderlessRetry however often it was refused; other failures back
// off from 100 ms to 5 s.
func TestEventRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		tries int
		err   error
		want  time.Duration
	}{
		{1, nats.ErrNoResponders, leaderlessRetry},
		{9, nats.ErrNoResponders, leaderlessRetry},
		{9, fmt.Errorf("publishing: %w", natsjs.ErrNoStreamResponse), leaderlessRetry},
		{1, errNoPubAck, 100 * time.Millisecond},
		{3, errNoPubAck, 400 * time.Millisecond},
		{9, errNoPubAck, 5 * time.Second},
		{9, nats.ErrTimeout, 5 * time.Second},
	} {
		if got := eventRetryDelay(tc.tries, tc.err); got != tc.want {
			t.Errorf("eventRetryDelay(%d, %v) = %v, want %v", tc.tries, tc.err, got, tc.want)
		}
	}
}
