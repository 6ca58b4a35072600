package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// A send claim (cancel.go) names the worker that wrote it, and that worker
// answers on a core subject of its own for as long as it lives. A worker
// that finds another live worker's fresh claim on a notification it is
// about to send waits for that worker's delivery record instead of taking
// the claim over: the other worker may have sent it already and be unable
// to store the record for now (notify_delivered electing a leader), or be
// waiting for the provider's answer. Found by the long chaos run on the
// cluster: a worker that had stopped hearing from its consumer kept
// sending, the standby was pinned meanwhile, was handed the same messages
// and sent them again, 2–7 s later. A claim whose worker is gone (its
// subscription went with its connection) is taken over at once: a send it
// made before it died is the crash window of the delivery record.

// claimHold bounds how long a live worker's claim holds off the others,
// from when it was written: the longest request (MaxRequestTimeout), the
// record's write and a reconnect. A claim older than that is taken over
// even when its worker answers (a worker stuck without NATS for longer).
func (w *Worker) claimHold() time.Duration {
	return w.cfg.MaxRequestTimeout + recordTimeout + ReconnectSettle
}

// holderTimeout bounds the question to a claim's worker.
const holderTimeout = 500 * time.Millisecond

// newWorkerID returns a random id that names this worker's claims.
func newWorkerID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// liveSubject is the core subject worker id of this channel answers on.
func (w *Worker) liveSubject(id string) string { return w.names.LiveSubject(w.name, id) }

// answerLiveness subscribes this worker's live subject: it answers every
// question until the subscription ends, with the process.
func (w *Worker) answerLiveness() (*nats.Subscription, error) {
	return w.js.Conn().Subscribe(w.liveSubject(w.id), func(m *nats.Msg) { _ = m.Respond(nil) })
}

// heldElsewhere reports whether the send claim rec holds off this worker:
// it is a claim of this channel's, written by another worker that still
// answers (or cannot be asked: doubt holds off too), less than claimHold
// ago. Claims of other channels, of workers that predate claim owners, of
// this worker (an attempt of its own that failed and did not release its
// claim) and of workers that are gone are taken over.
func (w *Worker) heldElsewhere(ctx context.Context, rec DeliveryRecord) bool {
	if !w.othersClaim(rec) {
		return false
	}
	if w.now().Sub(rec.ClaimedAt) >= w.claimHold() {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, holderTimeout)
	defer cancel()
	_, err := w.js.Conn().RequestWithContext(rctx, w.liveSubject(rec.ClaimedBy), nil)
	return !errors.Is(err, nats.ErrNoResponders)
}

// giveUpHold bounds how long a send claim of another worker of this channel
// that does not answer holds off giving up on its notification, from when it
// was written: the request it announces (RequestTimeout), the record's write
// and a reconnect. Such a worker may be gone, or only cut off from this one
// for now (its node partitioned, its connection moving to another node): if
// it sent, its record comes once it is back. Given up on meanwhile, the
// notification moved to the next channel of its route, which sends it
// again unless the record lands first. Found by the long chaos run on the
// cluster (bug 35): the standby, handed four messages past their
// fallback_after during an election, saw their claims, waited while the
// claiming worker answered, and gave up on them the moment it did not; the
// record came 0.4 s later. A send is not held off by such a claim (the
// crash window of the delivery record, as before): only a give-up is.
func (w *Worker) giveUpHold() time.Duration {
	return w.cfg.RequestTimeout + recordTimeout + ReconnectSettle
}

// silentClaimWait says how much longer the entry e, read before an
// attempt, holds off giving up on its notification: positive while it is a
// send claim of another worker of this channel (one that did not answer,
// or the attempt would be waiting for it) younger than giveUpHold.
func (w *Worker) silentClaimWait(e *entry, now time.Time) time.Duration {
	if e == nil || e.state() != StateSending {
		return 0
	}
	if !w.othersClaim(e.rec) {
		return 0
	}
	return e.rec.ClaimedAt.Add(w.giveUpHold()).Sub(now)
}

// othersClaim reports whether rec names another worker of this channel as
// its claim's owner (not a worker that predates claim owners, not this one).
func (w *Worker) othersClaim(rec DeliveryRecord) bool {
	return rec.ClaimedBy != "" && rec.ClaimedBy != w.id && rec.Channel == w.name
}
