package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// A notification's entry in notify_delivered (under [RecordKey] of its
// idempotency key) is one of three things, told apart by
// DeliveryRecord.State:
//
//   - a send claim (StateSending): a worker is about to send it, or is
//     sending it. The worker creates it with KV Create before the request
//     and replaces it with the delivery record once the provider accepted
//     the message; it deletes it again (at its revision) when the attempt
//     failed without the message possibly reaching the provider.
//   - a delivery record (State empty, as every record before issue 15):
//     delivered.
//   - a cancel mark (StateCancelled): [Cancel] created it; no worker sends
//     the notification any more, on any channel of its route.
//
// Claims and cancel marks are both written with KV Create, which succeeds
// only when the key has no entry: of a cancel and a send that race, exactly
// one wins. A cancel that finds a claim or a delivery record is too late; a
// worker that finds a cancel mark acks the message without sending it and
// publishes notify.events.cancelled.

// States of a notify_delivered entry.
const (
	// StateDelivered (empty) is a delivery record.
	StateDelivered = ""
	// StateSending is a send claim: a send has begun.
	StateSending = "sending"
	// StateCancelled is a cancel mark.
	StateCancelled = "cancelled"
)

// Event names of cancellation.
const (
	// EventCancelled: the notification was cancelled before any channel
	// sent it; it will not be sent.
	EventCancelled = "cancelled"
	// EventCancelTooLate: a cancel came after a send had begun or the
	// notification was delivered.
	EventCancelTooLate = "cancel_too_late"
)

// entry is a notify_delivered entry as read, with its revision.
type entry struct {
	rec DeliveryRecord
	rev uint64
	// corrupt: an entry that is not a record of this key (nothing to
	// send: treated as delivered, as before claims existed).
	corrupt bool
}

func (e *entry) state() string {
	if e.corrupt {
		return StateDelivered
	}
	return e.rec.State
}

// settles reports whether the entry settles its notification: any record
// but a send claim, whose send may have failed. No entry settles nothing.
func (e *entry) settles() bool {
	return e != nil && e.state() != StateSending
}

// record is the entry's delivery record to tell the application again;
// nil when the entry is not readable as one.
func (e *entry) record() *DeliveryRecord {
	if e.corrupt {
		return nil
	}
	return &e.rec
}

// readEntry reads the entry of key; nil when there is none.
func readEntry(ctx context.Context, kv natsjs.KeyValue, key string) (*entry, error) {
	e, err := kv.Get(ctx, RecordKey(key))
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading delivery record of %q: %w", key, err)
	}
	return parseEntry(key, e.Value(), e.Revision()), nil
}

// parseEntry makes the entry of key from its value and revision.
func parseEntry(key string, value []byte, rev uint64) *entry {
	out := &entry{rev: rev}
	if json.Unmarshal(value, &out.rec) != nil || out.rec.Key != key {
		out.corrupt = true
	}
	return out
}

// CancelOutcome says what [Cancel] found.
type CancelOutcome int

// Outcomes of a cancel.
const (
	// Cancelled: the cancel mark is written (or was, by an earlier cancel);
	// no worker will send the notification.
	Cancelled CancelOutcome = iota + 1
	// CancelTooLate: a worker had begun sending it (Record.State is
	// StateSending) or delivered it.
	CancelTooLate
)

// String names the outcome as its event does.
func (o CancelOutcome) String() string {
	switch o {
	case Cancelled:
		return EventCancelled
	case CancelTooLate:
		return EventCancelTooLate
	}
	return fmt.Sprintf("CancelOutcome(%d)", int(o))
}

// CancelResult is the answer of [Cancel].
type CancelResult struct {
	Outcome CancelOutcome
	// Record is the entry that decided it: the cancel mark (this one or an
	// earlier one), the send claim or the delivery record.
	Record DeliveryRecord
	// Earlier: the cancel mark was written before, by another cancel.
	Earlier bool
}

// Cancel cancels the published notification with this idempotency key
// before a worker sends it: it creates the cancel mark in notify_delivered
// with KV Create, which succeeds only if no worker has claimed the
// notification for a send (or delivered it), and then no worker sends it.
// It publishes the outcome as an event, notify.events.cancelled or
// notify.events.cancel_too_late, under a message id that makes a repeat
// harmless. by says who cancelled (shown in the mark and the event).
//
// A notification whose outbox row is not published yet is cancelled in the
// outbox instead (outbox.Cancel); cancelling a key that was never
// published leaves a mark that stops it if it is published later, within
// the bucket's TTL.
func Cancel(ctx context.Context, js natsjs.JetStream, names jetstream.Names, key, by string, at time.Time) (CancelResult, error) {
	kv, err := js.KeyValue(ctx, names.BucketDelivered)
	if err != nil {
		return CancelResult{}, fmt.Errorf("opening bucket %s: %w", names.BucketDelivered, err)
	}
	mark := DeliveryRecord{Key: key, State: StateCancelled, CancelledAt: at.UTC(), CancelledBy: by}
	b, err := json.Marshal(mark)
	if err != nil {
		return CancelResult{}, err
	}
	var res CancelResult
	_, err = kv.Create(ctx, RecordKey(key), b)
	switch {
	case err == nil:
		res = CancelResult{Outcome: Cancelled, Record: mark}
	case errors.Is(err, natsjs.ErrKeyExists):
		e, rerr := readEntry(ctx, kv, key)
		switch {
		case rerr != nil:
			return CancelResult{}, rerr
		case e == nil:
			// Deleted in between: a failed attempt released its claim.
			return Cancel(ctx, js, names, key, by, at)
		}
		res = CancelResult{Outcome: CancelTooLate, Record: e.rec}
		if e.state() == StateCancelled {
			res = CancelResult{Outcome: Cancelled, Record: e.rec, Earlier: true}
		}
	default:
		return CancelResult{}, fmt.Errorf("writing the cancel mark of %q to %s: %w", key, names.BucketDelivered, err)
	}
	ev := cancelEvent(res.Record, res.Outcome, by, at)
	if err := publishCancelEvent(ctx, js, names, ev); err != nil {
		return res, err
	}
	return res, nil
}

// cancelEvent is the event that reports a cancel's outcome.
func cancelEvent(rec DeliveryRecord, o CancelOutcome, by string, at time.Time) Event {
	ev := Event{Key: rec.Key, Event: o.String(), Channel: rec.Channel, Recipient: rec.Recipient, At: at.UTC()}
	switch {
	case o == Cancelled:
		ev.Description = "cancelled by " + rec.CancelledBy
		if !rec.CancelledAt.IsZero() {
			ev.At = rec.CancelledAt
		}
	case rec.State == StateSending:
		ev.Reason, ev.Description = "sending", fmt.Sprintf("cancel by %s came while %s was sending it", by, rec.Channel)
	default:
		ev.Reason, ev.ProviderID = "delivered", rec.ProviderID
		ev.Description = fmt.Sprintf("cancel by %s came after %s delivered it at %s", by, rec.Channel, rec.DeliveredAt.Format(time.RFC3339))
	}
	return ev
}

// publishCancelEvent stores a cancellation event and waits for its
// PubAck. The id is per key and outcome, so the canceller and the worker
// that finds the mark publish one event between them.
func publishCancelEvent(ctx context.Context, js natsjs.JetStream, names jetstream.Names, ev Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	subject := names.SubjectCancelled
	if ev.Event == EventCancelTooLate {
		subject = names.SubjectCancelTooLate
	}
	if _, err := js.Publish(ctx, subject, b, natsjs.WithMsgID(ev.Event+":"+ev.Key)); err != nil {
		return fmt.Errorf("publishing %s event of %q: %w", ev.Event, ev.Key, jetstream.Denied(js.Conn(), err))
	}
	return nil
}

// claimResult is what a worker's claim found.
type claimResult struct {
	// rev is the claim's revision (0 when not claimed).
	rev uint64
	// found is the entry that stops the send: a cancel mark or a delivery
	// record written by another worker.
	found *entry
	// held is the fresh claim of another live worker, which holds this
	// send off until that worker's record comes (holder.go).
	held *entry
}

// claim writes the send claim of the job's notification before a request,
// with the next batch of writes (records.go): over last, the revision of
// the key's last message the lookup before it read (the claim of an attempt
// that died mid-send, the delete marker of a released one, or none). A
// server that finds another last message refuses it (and the batch it is
// in); so does one that cannot take writes. The claim is then made on its
// own (store.claim), which reads what changed.
func (r *recorder) claim(ctx context.Context, key, target string, seq, last uint64) (claimResult, error) {
	m, err := r.s.claimMsg(key, target, seq, last)
	if err != nil {
		return claimResult{}, err
	}
	rev, err := r.put(ctx, m)
	if err == nil && rev > 0 {
		return claimResult{rev: rev}, nil
	}
	if ctx.Err() != nil {
		return claimResult{}, fmt.Errorf("claiming %q in %s: %w", key, r.s.names.BucketDelivered, ctx.Err())
	}
	return r.s.claim(ctx, key, target, seq)
}

// claimMsg is the write of a send claim over the key's last message at
// revision last (0: the key has no message yet), as a message that can be
// published with others.
func (s *store) claimMsg(key, target string, seq, last uint64) (*nats.Msg, error) {
	b, err := s.claimValue(key, target, seq)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: prefixedRecordKey(s.deliveredSubjects.prefix, key), Data: b, Header: nats.Header{}}
	m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	return m, nil
}

// claimValue is the value of a send claim.
func (s *store) claimValue(key, target string, seq uint64) ([]byte, error) {
	r := DeliveryRecord{Key: key, Channel: s.channel, Recipient: target, State: StateSending, StreamSeq: seq,
		ClaimedAt: s.now().UTC(), ClaimedBy: s.worker}
	return r.marshal()
}

// claim creates the send claim of the job's notification on its own, with
// KV Create. A claim left by an attempt that died mid-send is taken over at
// its revision; a cancel mark or a delivery record is returned instead, and
// so is the fresh claim of another live worker sending the same key (a
// redelivery race, or a pin that moved: holder.go).
func (s *store) claim(ctx context.Context, key, target string, seq uint64) (claimResult, error) {
	b, err := s.claimValue(key, target, seq)
	if err != nil {
		return claimResult{}, err
	}
	for range 3 {
		rev, err := s.delivered.Create(ctx, RecordKey(key), b)
		if err == nil {
			return claimResult{rev: rev}, nil
		}
		if !errors.Is(err, natsjs.ErrKeyExists) {
			return claimResult{}, fmt.Errorf("claiming %q in %s: %w", key, s.names.BucketDelivered, err)
		}
		e, err := readEntry(ctx, s.delivered, key)
		switch {
		case err != nil:
			return claimResult{}, err
		case e == nil:
			continue // released in between
		case e.state() != StateSending:
			return claimResult{found: e}, nil
		case s.held != nil && s.held(ctx, e.rec):
			return claimResult{held: e}, nil
		}
		rev, err = s.delivered.Update(ctx, RecordKey(key), b, e.rev)
		if err == nil {
			return claimResult{rev: rev}, nil
		}
		// Changed in between: look again.
	}
	return claimResult{}, fmt.Errorf("claiming %q in %s: the entry keeps changing", key, s.names.BucketDelivered)
}

// release deletes this attempt's claim, at its revision, after an attempt
// that did not deliver and cannot have delivered: a cancel may win again.
// A claim that cannot be deleted stays; a cancel then reports too late,
// and the next attempt takes the claim over.
func (s *store) release(ctx context.Context, key string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.delivered.Delete(ctx, RecordKey(key), natsjs.LastRevision(rev)); err != nil {
		s.log.Warn("cannot release the send claim; a cancel will find it and report too late", "key", key, "err", err)
	}
}

// cancelled tells the application that a job's notification was
// cancelled, and acks the job, without sending it, once that event is
// stored (as delivered does: a kill in between leaves the message to be
// redelivered and told again).
func (w *Worker) cancelled(j *job, mark DeliveryRecord, now time.Time) result {
	w.m.cancelled.Inc()
	ev := cancelEvent(mark, Cancelled, mark.CancelledBy, now)
	ev.Channel, ev.Recipient = w.name, j.lane
	w.events.publishThen(w.events.names.SubjectCancelled, EventCancelled+":"+j.n.Key, ev, func() { w.ack(j) })
	w.log.Info("cancelled; acked without sending", "key", j.n.Key, "seq", j.seq, "by", mark.CancelledBy)
	return result{job: j, disp: moveOn, at: now}
}
