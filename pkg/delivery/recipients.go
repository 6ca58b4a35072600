package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Dead recipients come back. A recipient found dead (state.go) costs no
// request for as long as its mark lasts; three things end it besides an
// operator deleting the mark (tgnotify chat revive):
//
//   - news from the provider, given to ChangeRecipient by an update intake
//     (Telegram's my_chat_member and /start: the user unblocked the bot);
//   - the retry after Config.DeadRetryAfter: once the mark is that old, the
//     recipient's next message is sent for real. Delivered, the recipient is
//     revived; answered dead again, the mark is rewritten with the new time,
//     which starts another period, and the application is not told again;
//   - any delivery to a recipient whose mark is older than the request:
//     the mark is obsolete.
//
// A revival publishes notify.events.recipient_revived.

// ViaUpdate is DeadRecipient.Via for a recipient found dead by news the
// provider sent the bot rather than by a send's answer.
const ViaUpdate = "update"

// ReasonRetryDelivered is the reason of a recipient revived because a
// message sent to it after Config.DeadRetryAfter was delivered.
const ReasonRetryDelivered = "retry_delivered"

// RecipientChange is news of a recipient that did not come from a send:
// the provider told the bot that the recipient can, or can no longer, be
// reached (a Telegram user blocked or unblocked the bot, or pressed Start).
type RecipientChange struct {
	// Recipient is the recipient's token on the worker's channel (a
	// Telegram chat id).
	Recipient string
	// Dead: the recipient can no longer be reached, for Reason, Code and
	// Description; false: it can again, Reason saying why (unblocked,
	// start, added).
	Dead        bool
	Reason      string
	Code        int
	Description string
	// At is when it happened, by the provider's clock.
	At time.Time
	// ID names the news uniquely and for good (u<Telegram update id>): the
	// event's message id derives from it, so news applied twice publishes
	// one event.
	ID string
}

// ErrInvalidChange reports a RecipientChange without a recipient or an id.
var ErrInvalidChange = errors.New("recipient change needs a recipient and an id")

// EventError reports an event that the stream did not store: the state
// change it announces was made. Applying the same change again publishes
// it again (the message id keeps it once).
type EventError struct {
	// Subject and ID are the event's.
	Subject, ID string
	// Err is JetStream's answer.
	Err error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("publishing event %s on %s: %v", e.ID, e.Subject, e.Err)
}

// Unwrap returns JetStream's answer.
func (e *EventError) Unwrap() error { return e.Err }

// recipients is what the revivals keep: their metrics, and the events a
// ChangeRecipient could not publish, for the next try of the same news.
type recipients struct {
	revived *prometheus.CounterVec
	retries *prometheus.CounterVec

	mu     sync.Mutex
	unsent map[string]unsentEvent
}

// unsentEvent is an event to publish again.
type unsentEvent struct {
	subject, id string
	ev          RecipientEvent
}

// maxUnsent bounds the events kept for a retry of their news.
const maxUnsent = 1024

func newRecipients(reg prometheus.Registerer, channel string) (*recipients, error) {
	const ns, sub = "tgnotify", "worker"
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"channel": channel}, reg)
	r := &recipients{
		revived: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "recipients_revived_total",
			Help: "Dead recipients revived, by what showed they are reachable: send (a retry after -dead-retry-after was delivered) or update (news from the provider: unblocked, /start)."}, []string{"via"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dead_retries_total",
			Help: "Messages sent to a dead recipient once -dead-retry-after had passed, by result: delivered (revived) or still_dead (the period starts again)."}, []string{"result"}),
		unsent: map[string]unsentEvent{},
	}
	for _, c := range []prometheus.Collector{r.revived, r.retries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ChangeRecipient applies news of a recipient from the provider: it marks
// a live recipient dead (with Via ViaUpdate) and publishes
// notify.events.recipient_dead, or revives a dead one (deletes its mark)
// and publishes notify.events.recipient_revived. It reports whether it
// changed anything: news of a recipient already dead, of one not marked
// dead, or older than the mark an earlier update wrote (updates that
// arrived out of order) changes nothing and publishes nothing. The running
// workers see the change within milliseconds.
//
// It waits until the worker has loaded the shared state (Run must be
// running). An error means the state could not be written, or the event
// not stored ([*EventError]): applying the same change again finishes it.
func (w *Worker) ChangeRecipient(ctx context.Context, c RecipientChange) (bool, error) {
	if c.Recipient == "" || c.ID == "" {
		return false, ErrInvalidChange
	}
	state := w.store.state
	select {
	case <-state.loaded:
	case <-ctx.Done():
		return false, fmt.Errorf("waiting for the shared state in %s: %w", w.names.BucketChats, ctx.Err())
	}
	news := c.Recipient + "/" + c.ID
	if u, ok := w.recipients.takeUnsent(news); ok {
		return true, w.announce(ctx, news, u)
	}
	d, dead := state.deadRecipient(c.Recipient)
	if c.Dead {
		if dead {
			return false, nil
		}
		mark := DeadRecipient{Channel: w.name, Recipient: c.Recipient, Reason: c.Reason, Code: c.Code, Description: c.Description, At: c.At, Via: ViaUpdate}
		if err := state.markDead(ctx, mark); err != nil {
			return false, err
		}
		w.log.Info("recipient marked dead by the provider's news", "recipient", c.Recipient, "reason", c.Reason, "news", c.ID)
		return true, w.announce(ctx, news, unsentEvent{subject: w.names.SubjectRecipientDead, id: w.name + ":dead:" + c.Recipient + ":" + c.ID,
			ev: RecipientEvent{Channel: w.name, Recipient: c.Recipient, Reason: c.Reason, Code: c.Code, Description: c.Description, At: c.At}})
	}
	if !dead {
		return false, nil
	}
	if d.Via == ViaUpdate && d.At.After(c.At) {
		w.log.Info("news older than the recipient's dead mark; the mark stays", "recipient", c.Recipient, "news", c.ID,
			"news_at", c.At, "dead_at", d.At)
		return false, nil
	}
	if err := state.del(ctx, state.keys.dead(c.Recipient)); err != nil {
		return false, err
	}
	w.recipients.revived.WithLabelValues(ViaUpdate).Inc()
	w.log.Info("recipient revived by the provider's news", "recipient", c.Recipient, "reason", c.Reason, "news", c.ID,
		"dead_since", d.At, "dead_reason", d.Reason)
	return true, w.announce(ctx, news, unsentEvent{subject: w.names.SubjectRecipientRevived, id: w.name + ":revived:" + c.Recipient + ":" + c.ID,
		ev: RecipientEvent{Channel: w.name, Recipient: c.Recipient, Reason: c.Reason, Code: c.Code, Description: c.Description, At: c.At}})
}

// announce publishes a recipient event and waits for the stream to store
// it; one that is not stored is kept for the next try of its news.
func (w *Worker) announce(ctx context.Context, news string, u unsentEvent) error {
	b, err := json.Marshal(u.ev)
	if err == nil {
		_, err = w.js.Publish(ctx, u.subject, b, natsjs.WithMsgID(u.id))
	}
	if err != nil {
		w.recipients.keepUnsent(news, u)
		return &EventError{Subject: u.subject, ID: u.id, Err: jetstream.Denied(w.js.Conn(), err)}
	}
	return nil
}

func (r *recipients) takeUnsent(news string) (unsentEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.unsent[news]
	delete(r.unsent, news)
	return u, ok
}

func (r *recipients) keepUnsent(news string, u unsentEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.unsent) < maxUnsent {
		r.unsent[news] = u
	}
}

// retryDead reports whether a message to target, marked dead by d, is sent
// for real: Config.DeadRetryAfter has passed since d.At.
func (w *Worker) retryDead(j *job, target string, d DeadRecipient) bool {
	if !w.store.state.retryDue(d) {
		return false
	}
	w.log.Info("recipient dead for longer than dead-retry-after: trying once more", "recipient", target, "key", j.n.Key,
		"dead_since", d.At, "reason", d.Reason)
	return true
}

// aliveAfterSend runs after a delivery to target: a dead mark older than the
// request (start) is obsolete, since the provider took the message. That is
// a retry after DeadRetryAfter; the recipient is revived and the
// application told. A mark written after the request started (the user
// blocked the bot meanwhile) stays.
func (w *Worker) aliveAfterSend(ctx context.Context, j *job, target string, start, at time.Time) {
	d, ok := w.store.state.deadRecipient(target)
	if !ok {
		return
	}
	if d.Via == ViaUpdate {
		start = start.Add(-time.Second) // the provider's clock counts whole seconds
	}
	if !d.At.Before(start) {
		return
	}
	if err := w.store.state.del(ctx, w.store.state.keys.dead(target)); err != nil {
		w.log.Error("delivered to a dead recipient, but its mark cannot be deleted", "recipient", target, "err", err)
		return
	}
	w.recipients.retries.WithLabelValues("delivered").Inc()
	w.recipients.revived.WithLabelValues("send").Inc()
	w.log.Info("recipient revived: a message to it was delivered", "recipient", target, "key", j.n.Key, "dead_since", d.At, "dead_reason", d.Reason)
	w.store.publishEvent(ctx, w.names.SubjectRecipientRevived, fmt.Sprintf("%s:revived:%s:%d", w.name, target, j.seq),
		RecipientEvent{Channel: w.name, Recipient: target, Reason: ReasonRetryDelivered, Key: j.n.Key, At: at})
}

// stillDead handles a dead answer for a recipient already marked dead (a
// retry after DeadRetryAfter): the mark is rewritten with this answer and
// its time, which starts another period, and the application, told when it
// died, is not told again. It reports false when the recipient was not
// marked dead.
func (w *Worker) stillDead(ctx context.Context, j *job, target string, o Outcome, at time.Time) bool {
	d, ok := w.store.state.deadRecipient(target)
	if !ok {
		return false
	}
	w.recipients.retries.WithLabelValues("still_dead").Inc()
	w.log.Info("recipient still dead; tried again after dead-retry-after", "recipient", target, "key", j.n.Key,
		"dead_since", d.At, "reason", o.Reason)
	mark := DeadRecipient{Channel: w.name, Recipient: target, Reason: o.Reason, Code: o.Code, Description: o.Description, At: at, Key: j.n.Key}
	if err := w.store.state.markDead(ctx, mark); err != nil {
		w.log.Error("cannot record the dead recipient", "recipient", target, "err", err)
	}
	return true
}
