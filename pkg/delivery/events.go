package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Event tells the application what became of a notification. It is
// published on notify.events.delivered (a channel delivered it),
// notify.events.fallback (it moved to the next channel of its route, and
// why), notify.events.dead (no channel can deliver it any more),
// notify.events.cancelled and notify.events.cancel_too_late (cancel.go), in
// the NOTIFY stream, under a message id that makes a repeat after a crash
// harmless.
type Event struct {
	// Key is the notification's idempotency key.
	Key string `json:"key"`
	// Event is delivered, fallback, dead, cancelled or cancel_too_late.
	Event string `json:"event"`
	// Channel delivered it, or gave up on it.
	Channel string `json:"channel"`
	// Next is the channel it moved to (fallback).
	Next string `json:"next,omitempty"`
	// Recipient is the recipient's subject token on Channel (never an
	// email address or phone number in clear).
	Recipient string `json:"recipient,omitempty"`
	// ProviderID identifies the delivered message at the provider.
	ProviderID string `json:"provider_id,omitempty"`
	// Reason, Code and Description say why Channel gave up.
	Reason      string `json:"reason,omitempty"`
	Code        int    `json:"code,omitempty"`
	Description string `json:"description,omitempty"`
	// At is when it happened.
	At time.Time `json:"at"`
}

// Event names.
const (
	EventDelivered = "delivered"
	EventFallback  = "fallback"
	EventDead      = "dead"
)

// events publishes events without holding up the attempt that caused them:
// asynchronously, checking each PubAck, and publishing again (the message id
// drops a repeat) an event that was refused or not confirmed, with backoff,
// until it is stored. The application relies on them: an order whose
// delivered event was lost shows "pending" for ever (found by the chaos
// suite, when NATS restarted under the worker). While NATS is unreachable
// nothing is published: events wait instead of filling the reconnect buffer.
type events struct {
	js        natsjs.JetStream
	names     jetstream.Names
	channel   string
	log       *slog.Logger
	errors    func()
	connected func() bool

	// batches: the stream takes atomic batches, and events that wait
	// together are written as one (run).
	batches atomic.Bool
	// observe receives the size of every atomic batch (a metric).
	observe func(n int)
	// atomic publishes an atomic batch: commitAtomic, or a test's.
	atomic func(context.Context, natsjs.JetStream, []*nats.Msg) (*jetstreamext.BatchAck, error)

	queue   chan *pendingEvent  // to publish: new events and retries
	acks    chan publishedEvent // published, PubAck not checked yet
	pending atomic.Int64        // events not stored yet
	stop    chan struct{}       // closed when unstored events are abandoned
	done    sync.WaitGroup      // run's goroutines
	retries sync.WaitGroup      // retry timers waiting to queue their event
}

// pendingEvent is an event on its way to the stream.
type pendingEvent struct {
	msg   *nats.Msg
	tries int
	// stored, when set, runs once the event is stored (the worker acks the
	// message whose delivery it tells).
	stored func()
}

type publishedEvent struct {
	ev *pendingEvent
	f  natsjs.PubAckFuture
	at time.Time // when it was published
}

// eventAckWait bounds the wait for an event's PubAck. One that does not
// come in time is published again, as a refused one is: on a cluster a
// publish in flight when the stream's leader steps down or dies gets no
// answer at all while the connection stays up, and its future never
// resolves.
const eventAckWait = 2 * time.Second

// errNoPubAck is the retry's reason for an unanswered event.
var errNoPubAck = errors.New("no PubAck within " + eventAckWait.String())

// eventQueue bounds the events waiting to be published; more are dropped
// with a warning (NATS unreachable for long, at full rate).
const eventQueue = 65536

func newEvents(js natsjs.JetStream, names jetstream.Names, channel string, log *slog.Logger, onError func(), observe func(int)) *events {
	e := &events{js: js, names: names, channel: channel, log: log, errors: onError, observe: observe, atomic: commitAtomic,
		connected: func() bool { return js.Conn().IsConnected() },
		queue:     make(chan *pendingEvent, eventQueue), acks: make(chan publishedEvent, 4096), stop: make(chan struct{})}
	e.done.Add(2) // run and confirm; close waits for both
	return e
}

// start reads whether the stream the events go to takes atomic batches.
func (e *events) start(ctx context.Context) {
	learnAtomic(ctx, e.js, e.names.Stream, &e.batches, e.log, "the events' stream", "publishing events one by one")
}

// run publishes and confirms events until close. Run must be called once
// before close. The events that wait together when one is taken (those
// that came while the last batch was being stored) go as one atomic batch
// when there are at least minAtomicBatch and the stream takes batches: a
// server with sync_interval: always then fsyncs once for them instead of
// once each. A batch refused because the stream has no leader is published
// again, whole, every leaderlessRetry until it is stored. Fewer events, or
// a batch the server refuses for another reason (an event published
// before, whose message id fails the whole batch), are published one by
// one, asynchronously.
func (e *events) run() {
	go e.confirm()
	defer e.done.Done()
	wait := time.NewTicker(50 * time.Millisecond)
	defer wait.Stop()
	for {
		var batch []*pendingEvent
		select {
		case ev := <-e.queue:
			batch = append(batch, ev)
		case <-e.stop:
			close(e.acks)
			return
		}
		if e.batches.Load() {
			batch = e.gather(batch)
		}
		for !e.connected() {
			select {
			case <-wait.C:
			case <-e.stop:
				close(e.acks)
				return
			}
		}
		if len(batch) >= minAtomicBatch {
			var stored bool
			if batch, stored = e.commitWhileLeaderless(batch); stored {
				continue
			}
			if batch == nil {
				close(e.acks)
				return
			}
		}
		for _, ev := range batch {
			f, err := e.js.PublishMsgAsync(ev.msg)
			if err != nil {
				e.retry(ev, err)
				continue
			}
			select {
			case e.acks <- publishedEvent{ev: ev, f: f, at: time.Now()}:
			case <-e.stop:
				close(e.acks)
				return
			}
		}
	}
}

// leaderlessRetry is how often events are published again while their
// stream answers "no responders": it has no leader (an election, after its
// leader's node was killed or cut off) or does not exist yet. The same
// pace as the publisher's rounds: the first attempt after the new leader
// comes within it, where a backoff grown over a 4–9 s election told the
// application of deliveries seconds late and held their acks back as long.
const leaderlessRetry = 250 * time.Millisecond

// commitWhileLeaderless publishes batch as one atomic batch, and while the
// stream has no leader publishes it again every leaderlessRetry, with the
// events that queued meanwhile: nothing else can be stored, and one request
// each time for the lot costs the server nothing (published one by one,
// each event would be refused on its own). It returns the batch as it
// stands, whether it was stored, and nil when the events are abandoned
// (close). A batch cut short (batchCutShort: the leader came or changed
// while it was being sent) is published again at once, up to
// maxBatchCutShort times in a row. A batch refused for another reason is
// for the caller to publish one by one.
func (e *events) commitWhileLeaderless(batch []*pendingEvent) ([]*pendingEvent, bool) {
	var since time.Time
	cut := 0 // batches cut short in a row
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		err := e.commit(batch)
		if err == nil {
			if !since.IsZero() {
				e.log.Info("events stored: their stream answers again", "stream", e.names.Stream, "events", len(batch),
					"after", time.Since(since).Round(time.Millisecond))
			}
			return batch, true
		}
		if batchCutShort(err) && cut < maxBatchCutShort {
			cut++
			e.log.Info("a batch of events was cut short (its stream's leader came or changed while it was sent); publishing it again",
				"stream", e.names.Stream, "events", len(batch), "err", err)
			continue
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return batch, false
		}
		cut = 0
		e.errors()
		if since.IsZero() {
			since = time.Now()
			e.log.Warn("the events' stream has no leader; publishing the waiting events again every "+leaderlessRetry.String()+" until it answers",
				"stream", e.names.Stream, "events", len(batch))
		}
		for wait := true; wait; wait = !e.connected() { // while disconnected nothing is published
			t.Reset(leaderlessRetry)
			select {
			case <-t.C:
			case <-e.stop:
				return nil, false
			}
		}
		batch = e.gather(batch)
	}
}

// maxBatchCutShort bounds how often in a row a batch cut short is
// published again at once before its events go one by one.
const maxBatchCutShort = 3

// batchCutShort reports whether err refused a batch whose beginning its
// stream never saw: the stream got a leader (or a new one) while the batch
// was being sent, and the messages before it went nowhere. Nothing of the
// batch is stored, and the same batch sent again whole is taken: it used to
// fall back to one-by-one publishing (found by CI, when the stream came
// back in the middle of a batch).
func batchCutShort(err error) bool {
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstreamext.JSErrCodeBatchPublishIncomplete, jetstreamext.JSErrCodeBatchPublishMissingSeq:
		return true
	}
	return false
}

// gather appends the events waiting in the queue to batch, up to
// maxRecordBatch.
func (e *events) gather(batch []*pendingEvent) []*pendingEvent {
	for len(batch) < maxRecordBatch {
		select {
		case ev := <-e.queue:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}

// commit publishes batch as one atomic batch; once the server stored it,
// each event is done.
func (e *events) commit(batch []*pendingEvent) error {
	e.observe(len(batch))
	ctx, cancel := context.WithTimeout(context.Background(), eventAckWait)
	defer cancel()
	msgs := make([]*nats.Msg, len(batch))
	for i, ev := range batch {
		msgs[i] = ev.msg
	}
	_, err := e.atomic(ctx, e.js, msgs)
	if err != nil {
		var apiErr *natsjs.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishNotEnabled && e.batches.CompareAndSwap(true, false) {
			e.log.Warn("the events' stream no longer takes atomic batches; publishing events one by one", "stream", e.names.Stream)
		}
		e.log.Debug("a batch of events was not stored", "events", len(batch), "err", err)
		return err
	}
	for _, ev := range batch {
		if ev.tries > 0 {
			e.log.Info("event stored after being retried", "subject", ev.msg.Subject, "id", ev.msg.Header.Get(nats.MsgIdHdr), "tries", ev.tries+1)
		}
		e.pending.Add(-1)
		if ev.stored != nil {
			ev.stored()
		}
	}
	return nil
}

// confirm checks the PubAcks in publishing order.
func (e *events) confirm() {
	defer e.done.Done()
	for p := range e.acks {
		// Measured from the publish, so that events behind an unanswered
		// one are not each given the whole wait again.
		late := time.NewTimer(time.Until(p.at.Add(eventAckWait)))
		select {
		case <-p.f.Ok():
			if p.ev.tries > 0 {
				e.log.Info("event stored after being retried", "subject", p.ev.msg.Subject, "id", p.ev.msg.Header.Get(nats.MsgIdHdr), "tries", p.ev.tries+1)
			}
			e.pending.Add(-1)
			if p.ev.stored != nil {
				p.ev.stored()
			}
		case err := <-p.f.Err():
			e.retry(p.ev, err)
		case <-late.C:
			e.retry(p.ev, errNoPubAck)
		case <-e.stop:
			late.Stop()
			return
		}
		late.Stop()
	}
}

// eventRetryDelay is how long an event refused or unanswered tries times, the
// last time with err, waits before it is published again: leaderlessRetry
// when the stream has no leader, so that it goes soon after the election;
// otherwise 100 ms doubling to 5 s.
func eventRetryDelay(tries int, err error) time.Duration {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrNoStreamResponse) {
		return leaderlessRetry
	}
	return min(100*time.Millisecond<<min(tries-1, 6), 5*time.Second)
}

// retry publishes ev again after eventRetryDelay.
func (e *events) retry(ev *pendingEvent, err error) {
	e.errors()
	if ev.tries == 0 {
		e.log.Warn("an event was not stored; publishing it again until it is", "subject", ev.msg.Subject,
			"id", ev.msg.Header.Get(nats.MsgIdHdr), "err", err)
	}
	ev.tries++
	delay := eventRetryDelay(ev.tries, err)
	e.retries.Add(1)
	go func() {
		defer e.retries.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			e.enqueue(ev)
		case <-e.stop:
		}
	}()
}

// enqueue queues ev for publishing, or drops it when the queue is full.
func (e *events) enqueue(ev *pendingEvent) {
	select {
	case e.queue <- ev:
	default:
		e.pending.Add(-1)
		e.errors()
		e.log.Error("event queue full: an event is lost", "subject", ev.msg.Subject, "id", ev.msg.Header.Get(nats.MsgIdHdr))
	}
}

// close waits at most timeout for every event to be stored, then abandons
// the rest.
func (e *events) close(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for e.pending.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.pending.Load(); n > 0 {
		e.log.Warn("events not stored at shutdown", "count", n)
	}
	close(e.stop)
	e.done.Wait()
	e.retries.Wait()
}

func (e *events) publish(subject, id string, ev Event) { e.publishThen(subject, id, ev, nil) }

// publishThen publishes ev and runs stored (if not nil) once it is stored.
func (e *events) publishThen(subject, id string, ev Event, stored func()) {
	b, err := ev.marshal()
	if err != nil {
		return
	}
	m := &nats.Msg{Subject: subject, Data: b, Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, id)
	m.Header.Set(jetstream.HeaderKey, ev.Key)
	m.Header.Set(jetstream.HeaderContentType, "application/json")
	e.pending.Add(1)
	e.enqueue(&pendingEvent{msg: m, stored: stored})
}

// delivered tells that the notification was delivered on channel. A
// redelivery that finds the delivery record tells it again from the
// record: the first event may have been lost in a crash; the message id
// drops the repeat.
//
// stored (when not nil) runs once the event is stored: the worker acks the
// message only then, so that a worker killed between the two leaves the
// message to be redelivered, found delivered, and told again — an acked
// message whose event was lost would show "pending" in the application for
// ever (found by the chaos runs: one or two delivered orders per run had no
// event).
func (e *events) delivered(key, channel, recipient, providerID string, at time.Time, stored func()) {
	e.publishThen(e.names.SubjectDelivered, "delivered:"+key, Event{
		Key: key, Event: EventDelivered, Channel: channel, Recipient: recipient, ProviderID: providerID, At: at}, stored)
}

// fallback tells that the notification moved to next.
func (e *events) fallback(j *job, next notify.Channel, l letter, at time.Time) {
	e.publish(e.names.SubjectFallback, "fallback:"+j.n.Key+":"+e.channel, Event{
		Key: j.n.Key, Event: EventFallback, Channel: e.channel, Next: string(next), Recipient: j.lane,
		Reason: l.reason, Code: l.code, Description: l.description, At: at})
}

// dead tells that no channel can deliver the notification any more.
func (e *events) dead(j *job, l letter, at time.Time) {
	if j.n.Key == "" {
		return // poison without a key: nobody to tell
	}
	e.publish(e.names.SubjectDead, "dead:"+j.n.Key, deadEvent(e.channel, j, l, at))
}

// deadNow publishes the dead event and waits until it is stored, so that
// the message is terminated only after it: a worker killed in between
// leaves the message to be redelivered and given up on again, where a
// terminated message whose event was lost leaves the application waiting
// for ever (found by CI's chaos run on the cluster). The message id drops
// a repeat.
func (e *events) deadNow(ctx context.Context, j *job, l letter, at time.Time) error {
	if j.n.Key == "" {
		return nil
	}
	b, err := json.Marshal(deadEvent(e.channel, j, l, at))
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: e.names.SubjectDead, Data: b, Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, "dead:"+j.n.Key)
	m.Header.Set(jetstream.HeaderKey, j.n.Key)
	m.Header.Set(jetstream.HeaderContentType, "application/json")
	pctx, cancel := context.WithTimeout(ctx, eventAckWait)
	defer cancel()
	if _, err := e.js.PublishMsg(pctx, m); err != nil {
		return fmt.Errorf("publishing the dead event of %q: %w", j.n.Key, jetstream.Denied(e.js.Conn(), err))
	}
	return nil
}

func deadEvent(channel string, j *job, l letter, at time.Time) Event {
	return Event{Key: j.n.Key, Event: EventDead, Channel: channel, Recipient: j.lane,
		Reason: l.reason, Code: l.code, Description: l.description, At: at}
}
