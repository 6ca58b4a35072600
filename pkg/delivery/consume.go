package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Dead-letter reasons of the engine itself; a channel adds its own
// (blocked, content, hard_bounce, ...).
const (
	// ReasonPoison: the payload cannot be decoded or validated, or does not
	// match its subject.
	ReasonPoison = "poison"
	// ReasonMaxAttempts: MaxAttempts transient failures.
	ReasonMaxAttempts = "max_attempts"
	// ReasonExpired: the notification's expires_at passed before it could
	// be sent.
	ReasonExpired = "expired"
)

// errPoison wraps every reason a message is unusable.
var errPoison = errors.New("poison message")

// pullExpiry is how long one pull request waits on the server. The server
// unpins a client that sends no new pull request for the consumer's
// PinnedTTL, even one that is alive and whose request is still waiting; the
// standby is then pinned while this worker still holds messages. So pulls
// expire, and are renewed, every half pinned TTL (at least 1s, nats.go's
// minimum: a pinned TTL below 2s cannot be kept), instead of nats.go's 30s.
func (w *Worker) pullExpiry() time.Duration {
	info := w.res.Consumer.CachedInfo()
	if info == nil || info.Config.PinnedTTL <= 0 {
		return 30 * time.Second
	}
	return min(max(info.Config.PinnedTTL/2, time.Second), 30*time.Second)
}

// pullHeartbeat is how often the server is asked to tell, while a pull
// request waits, that it still holds it. nats.go issues the request again
// after two missed heartbeats, and its default is half the expiry: with the
// default pinned TTL (10 s) a request lost with its consumer's leader (a
// node killed in a cluster) was re-issued only 5 s later, after the new
// leader was long elected. At most 1 s, it is re-issued within 2 s.
func pullHeartbeat(expiry time.Duration) time.Duration {
	return min(expiry/2, time.Second)
}

// priorityGroup is the pinned priority group of the channel's consumer.
func (w *Worker) priorityGroup() string {
	if info := w.res.Consumer.CachedInfo(); info != nil && len(info.Config.PriorityGroups) > 0 {
		return info.Config.PriorityGroups[0]
	}
	return w.name
}

// consume pulls from the durable consumer in the pinned priority group and
// feeds the dispatcher, re-establishing the subscription if it ends
// (consumer deleted and re-created by an operator, say).
func (w *Worker) consume(ctx context.Context) {
	delay := 100 * time.Millisecond
	var quietWarned atomic.Int64 // when consumeErrLevel last let a lost pull request warn
	for ctx.Err() == nil {
		errs := make(chan error, 1)
		expiry := w.pullExpiry()
		cc, err := w.res.Consumer.Consume(func(m natsjs.Msg) { w.receive(ctx, m) },
			natsjs.PullPriorityGroup(w.priorityGroup()),
			natsjs.PullMaxMessages(w.cfg.PullBatch),
			natsjs.PullExpiry(expiry),
			natsjs.PullHeartbeat(pullHeartbeat(expiry)),
			natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
				if errors.Is(err, natsjs.ErrPinIDMismatch) {
					// The pin is gone; another worker may hold it now.
					// Reported on the goroutine that delivers messages, so
					// what arrives from here on carries the new epoch and
					// proves this worker pinned again. From here it writes
					// no request until it knows (pinreset.go); when pinned
					// again it checks for messages another one may hold
					// (takeover.go) however soon that is.
					w.pinEpoch.Add(1)
					w.unpinned()
					select {
					case w.pinLost <- struct{}{}:
					default:
					}
				}
				if errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, natsjs.ErrConsumerNotFound) {
					select {
					case errs <- err:
					default:
					}
				}
				w.log.Log(ctx, w.consumeErrLevel(err, &quietWarned), "consume error", "err", err)
			}))
		if err != nil {
			w.log.Error("cannot consume; retrying", "err", err, "retry_in", delay)
			w.consuming.Store(false)
			if !sleepCtx(ctx, delay) {
				return
			}
			delay = min(delay*2, 10*time.Second)
			continue
		}
		w.consuming.Store(true)
		delay = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			cc.Stop()
			<-cc.Closed()
			// Make sure the server has dropped this subscription's pull
			// requests before shutdown hands messages back: otherwise it
			// could redeliver them to the dead subscription, and they would
			// come back out of order after the ack wait.
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = w.js.Conn().FlushWithContext(fctx)
			cancel()
			w.consuming.Store(false)
			return
		case err := <-errs:
			w.log.Error("consumer is gone; re-subscribing", "err", err)
			cc.Stop()
		case <-cc.Closed():
			w.log.Warn("consume subscription ended; re-subscribing")
		}
		w.consuming.Store(false)
		if !sleepCtx(ctx, delay) {
			return
		}
	}
}

// quietWarnEvery is how often a pull request lost or unanswered is logged
// at WARN; the others of a streak are DEBUG.
const quietWarnEvery = 30 * time.Second

// consumeErrLevel is the level of a consume error. A pull request that got
// no heartbeat or no responders (the consumer is electing a leader, or its
// node is gone) is issued again every two heartbeats, so an election of
// seconds would log a pair of warnings a second: the first is a WARN, the
// others within quietWarnEvery are DEBUG. last holds when the first was.
func (w *Worker) consumeErrLevel(err error, last *atomic.Int64) slog.Level {
	if !errors.Is(err, natsjs.ErrNoHeartbeat) && !errors.Is(err, nats.ErrNoResponders) {
		return slog.LevelWarn
	}
	now := w.now().UnixNano()
	if prev := last.Load(); prev != 0 && now-prev < int64(quietWarnEvery) {
		return slog.LevelDebug
	}
	last.Store(now)
	return slog.LevelWarn
}

// sleepCtx waits d or until ctx ends, and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// receive turns a stream message into a job for the dispatcher. It runs on
// the consumer's callback goroutine. A message that cannot be used (not a
// notification payload, wrong subject, mismatching key) is dead-lettered as
// poison at once, and the worker goes on.
func (w *Worker) receive(ctx context.Context, m natsjs.Msg) {
	now := w.now()
	newPin := w.pinnedAs(ctx, m.Headers().Get(pinIDHeader))
	j := &job{
		reply: newReplySubject(w.js.Conn(), m.Reply()), subject: m.Subject(),
		data: m.Data(), header: packHeader(m.Headers(), pinIDHeader),
		received: now, progress: now, pinEpoch: w.pinEpoch.Load(), newPin: newPin,
	}
	err := w.decode(j, m)
	w.arrivals.note(j.cseq, j.pinEpoch, newPin)
	if w.deliveryGap(j.cseq) {
		w.gapSeen.Store(true) // told by the next arrival to reach the dispatcher
	}
	if err != nil {
		w.log.Warn("poison message", "subject", j.subject, "seq", j.seq, "err", err)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.store.deadLetter(dctx, j, letter{reason: ReasonPoison, description: err.Error()}); err != nil {
			w.log.Error("cannot dead-letter a poison message; it will come back", "seq", j.seq, "err", err)
			_ = j.reply.NakWithDelay(5 * time.Second)
			return
		}
		w.countDead(ReasonPoison)
		if k := m.Headers().Get(jetstream.HeaderKey); k != "" {
			// No channel can read it either: the application hears that its
			// notification is dead, and why.
			j.n.Key = k
			w.events.dead(j, letter{reason: ReasonPoison, description: err.Error()}, now)
		}
		return
	}
	if j.n.Scheduled(now) {
		w.schedule(j, now)
		return
	}
	// A gap seen on this message or on one that did not reach the
	// dispatcher (poison, scheduled) begins a takeover with this one.
	j.gap = w.gapSeen.Swap(false)
	w.received.Add(1)
	select {
	case w.incoming <- j:
	case <-ctx.Done():
		// Stopping: shutdown collects what is queued and hands it back in
		// stream order; only if the queue is full is it handed back here.
		select {
		case w.incoming <- j:
		default:
			if w.js.Conn().IsConnected() {
				_ = j.reply.Nak()
			}
		}
	}
}

// parse reads a notification message of this worker's channel: its
// payload and recipient, or why it is poison.
func (w *Worker) parse(subject string, h nats.Header, data []byte) (notify.Notification, string, error) {
	channel, recipient, err := w.names.ParseSubject(subject)
	if err != nil {
		return notify.Notification{}, "", fmt.Errorf("%w: %v", errPoison, err)
	}
	if channel != w.name {
		return notify.Notification{}, "", fmt.Errorf("%w: subject %s is not a %s notification subject", errPoison, subject, w.name)
	}
	n, err := decodePayload(data)
	if err != nil {
		return notify.Notification{}, recipient, fmt.Errorf("%w: %v", errPoison, err)
	}
	want, err := w.channel.Recipient(n)
	if err != nil {
		return notify.Notification{}, recipient, fmt.Errorf("%w: %v", errPoison, err)
	}
	if want != recipient {
		return notify.Notification{}, recipient, fmt.Errorf("%w: payload recipient %s does not match subject %s", errPoison, want, subject)
	}
	if k := h.Get(jetstream.HeaderKey); k != "" && k != n.Key {
		return notify.Notification{}, recipient, fmt.Errorf("%w: %s header %q does not match payload key %q", errPoison, jetstream.HeaderKey, k, n.Key)
	}
	if !slices.Contains(n.Route, notify.Channel(w.name)) {
		return notify.Notification{}, recipient, fmt.Errorf("%w: %s is not on the notification's route %v", errPoison, w.name, n.Route)
	}
	return n, recipient, nil
}

// deliveryGap notes the consumer sequence cseq of a delivery that reached
// this worker, and reports whether the consumer delivered something since
// the last one that never did. A pinned worker is handed every delivery of
// the consumer, each with the next consumer sequence, redeliveries too, so
// a sequence skipped is a delivery lost on its way: sent over a connection
// that went down, or dropped on a route between nodes. The consumer counts
// that message delivered and redelivers it only after the ack wait, while
// the recipient's next message may already be here (bug 57: a chat's order
// 06730 went before 06729, lost with the connection of a node that went
// down a moment after it was delivered). A gap begins a takeover
// (onArrival), whose lane checks find the lost message out with the
// consumer. A gap after the pin moved is one too, and begins the takeover
// the new pin begins anyway. Runs on the consumer's callback goroutine;
// safe for concurrent use.
func (w *Worker) deliveryGap(cseq uint64) bool {
	for {
		last := w.lastDelivery.Load()
		if cseq <= last {
			return false // late, or a consumer leader that reuses sequences
		}
		if w.lastDelivery.CompareAndSwap(last, cseq) {
			return last != 0 && cseq > last+1
		}
	}
}

// decode fills the job from its message m and reports why it is poison.
func (w *Worker) decode(j *job, m natsjs.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("%w: no JetStream metadata: %v", errPoison, err)
	}
	j.seq = meta.Sequence.Stream
	j.delivered = meta.NumDelivered
	j.cseq = meta.Sequence.Consumer
	n, recipient, err := w.parse(j.subject, m.Headers(), j.data)
	j.lane = recipient
	if err != nil {
		return err
	}
	j.n = n
	j.transactional = n.Priority != notify.PriorityBulk
	j.since = n.CreatedAt
	if v := m.Headers().Get(jetstream.HeaderChannelSince); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("%w: %s %q is not RFC 3339", errPoison, jetstream.HeaderChannelSince, v)
		}
		j.since = t
	}
	if j.n.NotBefore.After(j.since) {
		// fallback_after counts from when the notification may be sent.
		j.since = j.n.NotBefore
	}
	return nil
}

// maxScheduleDelay caps the NAK delay of a scheduled message: one due
// later comes back every hour and is handed back again, so that a clock
// that was wrong when it was handed back, or a consumer re-created in
// between, delays it by an hour at most.
const maxScheduleDelay = time.Hour

// schedule hands a message whose not_before has not come back to the
// stream, with a NAK delay until then (at most maxScheduleDelay). It
// never enters a lane: it holds no worker slot and holds back no later
// message of its recipient (docs/WORKER.md, "Scheduled notifications").
// The consumer keeps it as pending (one of MaxAckPending) until it comes
// back; a restart of the worker does not change when.
func (w *Worker) schedule(j *job, now time.Time) {
	d := min(j.n.NotBefore.Sub(now), maxScheduleDelay)
	if err := j.reply.NakWithDelay(d); err != nil {
		// It comes back after the ack wait and is handed back again.
		w.log.Warn("cannot hand a scheduled message back; it comes back after the ack wait", "key", j.n.Key, "seq", j.seq, "err", err)
		return
	}
	w.m.scheduled.Inc()
	w.log.Debug("scheduled: handed back until not_before", "key", j.n.Key, "seq", j.seq,
		"not_before", j.n.NotBefore, "back_in", d)
}
