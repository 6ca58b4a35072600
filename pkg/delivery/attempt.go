package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// stateRetry is how long a lane waits after JetStream could not be read or
// written (a NATS outage) before it tries again.
const stateRetry = time.Second

// claimWait bounds the wait for the send claim's write. Longer, the
// notify_delivered bucket is electing a leader (4–9 s on a cluster), and the
// send goes without a claim rather than wait for it (attempt).
const claimWait = 2 * time.Second

// claimRetry is how long a send waits after its claim could not be written
// before it tries again. The lookup before the claim was answered, so
// notify_delivered serves reads but takes no write: its leader is being
// elected, and the claim is written within a few hundred milliseconds of
// the end of the election when tried this often (stateRetry lost up to a
// second after each one). The tokens of such an attempt are given back, as
// no request was made; what a retry costs is one batched lookup and one
// claim that fails at once.
const claimRetry = 250 * time.Millisecond

// maxRedirects bounds how many redirects one attempt follows.
const maxRedirects = 3

// Reasons of the engine's own give-ups besides ReasonPoison,
// ReasonMaxAttempts and ReasonExpired.
const (
	// ReasonFallbackTimeout: the channel did not deliver within the
	// notification's fallback_after; it moves to the next channel.
	ReasonFallbackTimeout = "fallback_timeout"
)

// attempt makes one attempt at a job: it skips what must not be sent
// (already delivered, dead recipient, expired, out of attempts, past its
// fallback deadline), has the channel send it, and carries out the outcome
// that needs I/O (delivery record and ack, fallback to the next channel,
// dead letter, attempt count, events). It runs on a sender goroutine; what
// changes the dispatcher's state is reported in the result.
func (w *Worker) attempt(ctx context.Context, j *job, target string) result {
	if g := j.givingUp; g != nil {
		return w.giveUp(ctx, j, g.target, g.letter, g.fallback)
	}
	now := w.now()
	remembered, e, last, err := w.store.lookup(ctx, j.n.Key)
	if err != nil {
		w.log.Warn("cannot read the delivery record; retrying later", "key", j.n.Key, "err", err)
		return result{job: j, disp: retryHere, at: now, delay: stateRetry}
	}
	if remembered {
		return w.deliveredHere(ctx, j, now)
	}
	if r, ok := w.settledBy(ctx, j, e, now); ok {
		return r
	}
	// A send claim left by an attempt that died mid-send: sent again, as
	// before claims existed (the crash window of delivered). Not while this
	// worker settles, though: neither sent nor given up on (settleWait).
	if wait := w.settleWait(j, now); wait > 0 {
		return result{job: j, disp: retryHere, at: now, delay: wait}
	}
	// A give-up is decided on what the bucket's leader holds: the read
	// above may have been answered by a replica that is behind, and a
	// notification handed on for want of a record it did not know of
	// cannot be taken back (bug 53). Nor is it given up on while such a
	// claim is young: its worker may only be cut off from this one, and
	// write its record when back (giveUpHold).
	giveUp := func(l letter, fallback bool) result {
		e, r, settled := w.confirmNotDelivered(ctx, j, e, last, now)
		if settled {
			return r
		}
		if wait := w.silentClaimWait(e, now); wait > 0 {
			return w.waitForSilentHolder(j, e, l.reason, now)
		}
		return w.giveUp(ctx, j, target, l, fallback)
	}
	if d, ok := w.store.state.deadRecipient(target); ok && !w.retryDead(j, target, d) {
		return giveUp(letter{reason: d.Reason, code: d.Code,
			description: fmt.Sprintf("recipient %s was found dead at %s: %s", target, d.At.Format(time.RFC3339), d.Description)}, true)
	}
	if j.n.Expired(now) {
		return giveUp(letter{reason: ReasonExpired,
			description: "notification expired at " + j.n.ExpiresAt.Format(time.RFC3339) + " before it could be sent"}, false)
	}
	past := w.attemptsSoFar(ctx, j)
	prior := past.n
	switch {
	case past.done:
		// Given up on before, and the termination was lost: never one more
		// request, the next channel may have it by now.
		return giveUp(letter{reason: past.reason, description: "given up on before; repeated"}, true)
	case prior >= w.cfg.MaxAttempts:
		// Out of attempts already: a redelivery after the worker gave up
		// and then died before terminating the message.
		return giveUp(letter{reason: ReasonMaxAttempts, attempts: prior,
			description: fmt.Sprintf("%d failed attempts", prior)}, true)
	}
	if dl := w.fallbackDeadline(j); !dl.IsZero() && !now.Before(dl) {
		return giveUp(letter{reason: ReasonFallbackTimeout, attempts: prior,
			description: fmt.Sprintf("not delivered on %s within %v", w.name, dl.Sub(j.since).Round(time.Second))}, true)
	}
	// The send claim: from here a cancel is too late, until the claim is
	// released after an attempt that cannot have delivered.
	cctx, cancel := context.WithTimeout(ctx, claimWait)
	c, err := w.records.claim(cctx, j.n.Key, target, j.seq, last)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return result{job: j, disp: retryHere, at: now, delay: stateRetry}
	case err != nil:
		// The entry was just read, so notify_delivered answers reads but
		// takes no write: its leader is being elected. The send waits for
		// it: without a claim, another worker handed the same message
		// meanwhile (the pin moving in the same election) would find
		// nothing and send it too, and a cancel written meanwhile would
		// lose (found by the long chaos run on the cluster).
		w.m.claimWaits.Inc()
		w.log.Warn("cannot write the send claim; the send waits for it", "key", j.n.Key, "err", err, "retry_in", claimRetry)
		return result{job: j, disp: retryHere, at: now, delay: claimRetry}
	case c.held != nil:
		return w.waitForHolder(j, c.held, now)
	case c.found != nil && c.found.state() == StateCancelled:
		return w.cancelled(j, c.found.rec, now)
	case c.found != nil:
		return w.alreadyDelivered(j, c.found.record(), now)
	}
	keep := false
	defer func() {
		if !keep && c.rev > 0 {
			w.store.release(ctx, j.n.Key, c.rev)
		}
	}()
	for hop := 0; ; hop++ {
		o, t, refused, start, end := w.send(ctx, j, target, prior+1)
		keep = o.Kind == Delivered || o.MaybeDelivered
		switch o.Kind {
		case Delivered, Transient, Rejected, RecipientDead, Redirect, Halt, RetryAfter:
			w.m.sendSeconds.Observe(end.Sub(start).Seconds())
			w.m.requests.WithLabelValues(o.Kind.String()).Inc()
			w.degrade.observe(end.Sub(start))
		}
		if o.Kind == RetryAfter {
			// Paused here, before the ticket is settled: requests admitted
			// before this point are counted as crossing the 429, and none
			// is admitted after it (admission.go).
			p := pause{Until: end.Add(o.Delay), Reason: "429 for recipient " + target}
			crossing := w.adm.pauseFor(p, t)
			w.broadcastPause(p)
			w.degrade.rateLimited(end)
			w.m.crossing.Add(float64(crossing.count))
			w.stats.crossing.Add(int64(crossing.count))
			t.settle(o)
			w.m.rateLimited.Inc()
			w.stats.limited.Add(1)
			w.log.Warn("rate limit hit: pausing every request", "retry_after", o.Delay, "recipient", target, "key", j.n.Key,
				"crossing", crossing.count, "in_flight_with", crossing.String())
			return result{job: j, disp: retryLater, delay: o.Delay, at: end, called: true, pause: &p}
		}
		t.settle(o)
		called := result{job: j, at: end, called: true}
		switch o.Kind {
		case Delivered:
			w.delivered(ctx, j, o, target, end, c.rev)
			w.aliveAfterSend(ctx, j, target, start, end)
			called.disp = moveOn
			return called

		case Redirect:
			if o.RedirectTo == "" || o.RedirectTo == target || hop >= maxRedirects {
				return w.transient(ctx, j, o, end, prior)
			}
			w.m.redirects.Inc()
			w.log.Info("recipient moved; following", "from", target, "to", o.RedirectTo, "key", j.n.Key)
			if err := w.store.state.markRedirect(ctx, target, o.RedirectTo); err != nil {
				w.log.Error("cannot record the redirect", "from", target, "to", o.RedirectTo, "err", err)
			}
			w.store.publishEvent(ctx, w.names.SubjectRecipientRedirected, w.name+":redirected:"+target,
				RecipientEvent{Channel: w.name, Recipient: target, Reason: o.Reason, Code: o.Code, Description: o.Description,
					RedirectTo: o.RedirectTo, Key: j.n.Key, At: end})
			target = o.RedirectTo
			continue

		case Rejected, RecipientDead:
			w.m.failures.WithLabelValues(o.Reason).Inc()
			if o.Unrecognised {
				w.m.unrecognised.WithLabelValues(o.Reason, fmt.Sprint(o.Code)).Inc()
				w.log.Warn("permanent answer with an unrecognised description", "code", o.Code, "description", o.Description, "key", j.n.Key)
			}
			w.stats.window.add(end, false)
			if o.Kind == RecipientDead {
				w.recipientDied(ctx, j, target, o, end)
			}
			r := w.giveUp(ctx, j, target, letter{reason: o.Reason, code: o.Code, description: o.Description, attempts: prior + 1}, true)
			r.called = true
			return r

		case Halt:
			w.log.Error("the provider rejected the credentials: sending stopped; fix them, nothing is dead-lettered",
				"code", o.Code, "reason", o.Reason, "description", o.Description)
			called.disp = retryHere
			called.halt = fmt.Sprintf("credentials rejected (%d %s)", o.Code, o.Description)
			return called

		case NotSent:
			// Not admitted: nothing left the process. The message waits at
			// the head of its lane until admission allows again.
			called.called = false
			called.disp = retryHere
			if refused != nil && !refused.Until.IsZero() {
				called.delay = max(refused.Until.Sub(end), 0)
			}
			return called

		case Canceled:
			called.disp, called.called = retryHere, o.MaybeDelivered
			return called

		case Transient:
			return w.transient(ctx, j, o, end, prior)

		default:
			w.log.Error("channel returned an invalid outcome; retrying as a transient failure", "outcome", o.Kind.String(), "key", j.n.Key)
			o.Kind, o.Reason = Transient, "invalid_outcome"
			return w.transient(ctx, j, o, end, prior)
		}
	}
}

// deliveredHere handles a job this process delivered (or found delivered)
// recently: it is never sent again. It is acked only as a redelivery found
// in the bucket is (alreadyDelivered: the delivered event told again, the
// ack once that is stored), because the first attempt's event may still be
// on its way: acked at once, the message was gone while the event waited
// to be stored, and a worker killed then lost the event for good (the long
// cluster chaos run: 14 delivered orders the application never heard of).
// While the record is not in the bucket yet — the first attempt is still
// writing it — or cannot be read, the job waits and looks again.
func (w *Worker) deliveredHere(ctx context.Context, j *job, now time.Time) result {
	e, _, err := w.store.read(ctx, j.n.Key)
	switch {
	case err != nil:
		w.log.Warn("cannot read the delivery record; retrying later", "key", j.n.Key, "err", err)
	case e != nil && e.state() == StateDelivered:
		return w.alreadyDelivered(j, e.record(), now)
	case e != nil && e.state() == StateCancelled:
		return w.cancelled(j, e.rec, now)
	default:
		w.log.Debug("delivered by this worker, its record not stored yet: waiting for it", "key", j.n.Key, "seq", j.seq)
	}
	return result{job: j, disp: retryHere, at: now, delay: stateRetry}
}

// alreadyDelivered acks a job delivered before, on this channel or another
// one of the route (a redelivery, a republish, a replay, or a fallback copy
// that lost the race to a late success): never twice. The delivered event is
// told again from the record (the first one may be lost), and the job is
// acked once that is stored.
func (w *Worker) alreadyDelivered(j *job, rec *DeliveryRecord, now time.Time) result {
	w.events.delivered(rec.Key, rec.Channel, rec.Recipient, rec.ProviderID, rec.DeliveredAt, func() { w.ack(j) })
	w.m.alreadyDelivered.Inc()
	w.stats.already.Add(1)
	w.log.Info("already delivered; acked without sending", "key", j.n.Key, "seq", j.seq)
	return result{job: j, disp: moveOn, at: now}
}

// waitForHolder puts the job back for a while: another live worker's
// fresh claim says it is sending the notification (holder.go); its record
// tells this worker, at the next attempt, that it was delivered.
func (w *Worker) waitForHolder(j *job, claim *entry, now time.Time) result {
	w.m.heldOff.Inc()
	w.log.Info("another worker is sending this notification; waiting for its record", "key", j.n.Key, "seq", j.seq,
		"holder", claim.rec.ClaimedBy, "claimed_at", claim.rec.ClaimedAt, "retry_in", stateRetry)
	return result{job: j, disp: retryHere, at: now, delay: stateRetry}
}

// waitForSilentHolder puts back a job this worker would give up on (for
// reason) while a young send claim of another worker that does not answer
// may still become a delivery record (silentClaimWait): at the next attempt
// the record, the claim's worker answering again, or the claim grown old
// decides.
func (w *Worker) waitForSilentHolder(j *job, claim *entry, reason string, now time.Time) result {
	w.m.heldOff.Inc()
	w.log.Info("another worker's send claim may still become a delivery: not giving up yet", "key", j.n.Key, "seq", j.seq,
		"reason", reason, "holder", claim.rec.ClaimedBy, "claimed_at", claim.rec.ClaimedAt, "retry_in", stateRetry)
	return result{job: j, disp: retryHere, at: now, delay: stateRetry}
}

// settleWait says how long j must wait before this worker sends it or gives up
// on it: until the settle after its last NATS reconnect ends, and a
// redelivery until its start-up settle ends (settleRedelivery). Another
// worker may have sent j and still be writing its delivery record: a
// message given up on in that time moves to the next channel of its route,
// which sends it again unless the record lands first. Found by the long
// chaos run (bug 31): right after a nats-server restart, the standby gave
// up on six notifications past their fallback_after, 0.5 s after its own
// reconnect and 0.9–3.9 s after the other worker had delivered them; that
// one, back 1.4 s later, wrote their records, and the next channels found
// them only just in time. A claim the other worker left is no guard then:
// it does not answer for it until its connection is back (holder.go).
func (w *Worker) settleWait(j *job, now time.Time) time.Duration {
	wait := w.settleRedelivery(j, now)
	if until := w.adm.settledAt(); now.Before(until) {
		wait = max(wait, until.Sub(now))
	}
	return wait
}

// settleRedelivery says how long a redelivered message without a delivery
// record must wait before this worker, started less than ReconnectSettle
// ago, sends it or gives up on it. A worker that started while NATS was
// down (or just after) can be handed the messages of another worker whose
// connection is not back yet: that one may have sent them already and
// writes their records only once it reconnects, within ReconnectSettle —
// the same wait a worker makes after its own reconnect (worker.go). Found by
// the chaos run: a worker started during a nats-server restart sent again
// what the other had delivered a second earlier. A first delivery never
// waits: no other worker has had it.
func (w *Worker) settleRedelivery(j *job, now time.Time) time.Duration {
	if !now.Before(w.freshUntil) || j.delivered <= 1 {
		return 0
	}
	return w.freshUntil.Sub(now)
}

// send has the channel send one attempt and returns its outcome, the
// admission ticket its request took (nil when none was admitted) and the
// refusal when admission said no.
func (w *Worker) send(ctx context.Context, j *job, target string, number int) (o Outcome, t *ticket, refused *NotAdmittedError, start, end time.Time) {
	a := &Attempt{Notification: j.n, Recipient: target, Number: number, Timeout: w.degrade.requestTimeout()}
	// Admit may be called on another goroutine (the HTTP transport's
	// writer), so its result is kept under a lock.
	var mu sync.Mutex
	a.admit = func() error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case t != nil:
			return nil
		case refused != nil:
			return refused
		}
		// Answers that began to arrive before this request asked are
		// settled first: one may be a 429 (answers.go).
		if waited := w.adm.awaitAnswers(); waited != answersNone && w.m != nil {
			w.m.answerWaits.WithLabelValues(waited.String()).Inc()
		}
		tk, err := w.adm.admit(w.now(), target)
		if err != nil {
			refused, _ = err.(*NotAdmittedError)
			return err
		}
		t = tk
		return nil
	}
	a.answered = func() {
		mu.Lock()
		tk := t
		mu.Unlock()
		tk.answering()
	}
	if w.pace != nil {
		if err := w.pace.wait(ctx); err != nil {
			// Stopping: nothing was written.
			now := w.now()
			return Outcome{Kind: Canceled, Description: "stopping before the request was written"}, nil, nil, now, now
		}
	}
	start = w.now()
	o = w.channel.Send(ctx, a)
	end = w.now()
	mu.Lock()
	defer mu.Unlock()
	if t == nil && refused == nil {
		switch o.Kind {
		case Transient, Halt:
			// Failed before the request could be written (a dial, TLS or
			// login failure): admitted now, so that the breaker counts it
			// like any other transient failure.
			if tk, err := w.adm.admit(end, target); err == nil {
				t = tk
			}
		case Delivered, RetryAfter, Rejected, RecipientDead, Redirect:
			// An answer to a request that never asked admission: a bug in
			// the channel. The answer is used, but logged.
			w.log.Error("channel sent without admission (Attempt.Admit)", "outcome", o.Kind.String())
		}
	}
	if o.Kind == NotSent && refused != nil && o.Description == "" {
		o.Description = refused.Error()
	}
	return o, t, refused, start, end
}

// transient counts a failed attempt and decides between a retry, a fallback
// to the next channel (out of attempts) and a dead letter (expired before
// the retry could happen).
func (w *Worker) transient(ctx context.Context, j *job, o Outcome, now time.Time, prior int) result {
	w.m.failures.WithLabelValues(o.Reason).Inc()
	w.stats.window.add(now, false)
	n := prior + 1
	if err := w.store.setAttempts(ctx, j.n.Key, n, o.MaybeDelivered); err != nil {
		w.log.Warn("cannot record the attempt count", "key", j.n.Key, "err", err)
	}
	if n >= w.cfg.MaxAttempts {
		r := w.giveUp(ctx, j, j.lane, letter{reason: ReasonMaxAttempts, code: o.Code, description: o.Description, attempts: n, maybeDelivered: o.MaybeDelivered}, true)
		r.called = true
		return r
	}
	delay := retryDelay(n, w.cfg.BackoffBase, w.cfg.BackoffCap, w.randN)
	if !j.n.ExpiresAt.IsZero() && !now.Add(delay).Before(j.n.ExpiresAt) {
		r := w.giveUp(ctx, j, j.lane, letter{reason: ReasonExpired, code: o.Code,
			description: fmt.Sprintf("notification expires at %s, before its retry; last error: %s", j.n.ExpiresAt.Format(time.RFC3339), o.Description), attempts: n}, false)
		r.called = true
		return r
	}
	if dl := w.fallbackDeadline(j); !dl.IsZero() && now.Add(delay).After(dl) {
		// Back by the fallback deadline, to move on to the next channel
		// then rather than a backoff later.
		delay = max(dl.Sub(now), parkGap)
	}
	w.stats.retries[min(n, 3)-1].Add(1)
	w.m.retries.WithLabelValues(fmt.Sprint(min(n, 3))).Inc()
	w.log.Warn("send failed; retrying", "key", j.n.Key, "recipient", j.lane, "attempt", n, "retry_in", delay,
		"reason", o.Reason, "code", o.Code, "description", o.Description, "may_have_been_delivered", o.MaybeDelivered)
	return result{job: j, disp: retryLater, delay: delay, at: now, called: true}
}

// settledBy settles a job by the notify_delivered entry read for it (nil:
// none) when the entry leaves nothing to do here: a cancel mark, a delivery
// record, or the fresh claim of a live worker sending it now, whose record
// the job waits for.
func (w *Worker) settledBy(ctx context.Context, j *job, e *entry, now time.Time) (result, bool) {
	switch {
	case e == nil:
		return result{}, false
	case e.state() == StateCancelled:
		return w.cancelled(j, e.rec, now), true
	case e.state() == StateDelivered:
		return w.alreadyDelivered(j, e.record(), now), true
	case e.state() == StateSending && w.heldElsewhere(ctx, e.rec):
		return w.waitForHolder(j, e, now), true
	}
	return result{}, false
}

// fallbackDeadline is when the job's notification moves on to the next
// channel of its route for taking too long on this one: FallbackAfter (the
// notification's, else the configured one of its priority) after it reached
// this channel. Zero when it never does (no next channel, or never).
func (w *Worker) fallbackDeadline(j *job) time.Time {
	if _, ok := j.n.Next(notify.Channel(w.name)); !ok {
		return time.Time{}
	}
	d := j.n.FallbackAfter
	if d == 0 {
		d = w.cfg.FallbackTransactional
		if j.n.Priority == notify.PriorityBulk {
			d = w.cfg.FallbackBulk
		}
	}
	if d <= 0 {
		return time.Time{}
	}
	return j.since.Add(d)
}

// due reports whether a held job can be settled without a request, and so
// without waiting for admission or a send token: it expired, its fallback
// deadline passed, or its recipient is dead. Nothing is due while the job
// must settle (settleWait): given up on then, it could be sent again by the
// next channel.
func (w *Worker) due(now time.Time) func(*job) bool {
	return func(j *job) bool {
		if w.settleWait(j, now) > 0 {
			return false
		}
		if j.n.Expired(now) || w.store.state.dead(j.lane) {
			return true
		}
		dl := w.fallbackDeadline(j)
		return !dl.IsZero() && !now.Before(dl)
	}
}

// attemptsSoFar reads the persisted attempt record; a first delivery has
// none.
func (w *Worker) attemptsSoFar(ctx context.Context, j *job) attempts {
	if j.delivered <= 1 {
		return attempts{}
	}
	a, err := w.store.attemptsOf(ctx, j.n.Key)
	if err != nil {
		w.log.Warn("cannot read the attempt count", "key", j.n.Key, "err", err)
	}
	return a
}

// giveUp ends this channel's part in the job: when fallback is set and the
// route has a next channel, the notification is published there first (and
// the application told); then this channel's give-up mark is stored, and
// the message is dead-lettered on this channel with its reason and
// terminated. A notification no channel can deliver any more ends with a
// dead event. If JetStream does not take the fallback, the mark or the dead
// letter, nothing is terminated: the message is tried again later, without
// spending an attempt. Once the notification is handed on (or the dead
// event stored), the next attempt only finishes the give-up, even if the
// next channel has delivered it meanwhile (job.givingUp).
//
// Every step is idempotent (message ids), so a worker that dies in between
// and gets the message again repeats them harmlessly; what made it give up
// is persistent (a dead recipient, the attempt count, the clock), so it
// gives up again instead of sending.
func (w *Worker) giveUp(ctx context.Context, j *job, target string, l letter, fallback bool) result {
	next, hasNext := notify.Channel(""), false
	if fallback {
		next, hasNext = j.n.Next(notify.Channel(w.name))
	}
	now := w.now()
	// A give-up repeated past its point of no return does not hand on or
	// tell the application again.
	done := j.givingUp != nil
	if hasNext && !done {
		// The event goes first, on the same connection: the stream stores
		// it before the fallback message, so the application hears of the
		// move before the next channel can report a delivery.
		w.events.fallback(j, next, l, now)
		if err := w.store.fallback(ctx, j, next, l, now); err != nil {
			w.log.Error("cannot hand the notification to the next channel; retrying later", "key", j.n.Key, "next", next, "err", err)
			return result{job: j, disp: retryHere, at: now, delay: stateRetry}
		}
		w.m.fallbacks.WithLabelValues(string(next), l.reason).Inc()
		if l.maybeDelivered {
			// The last request may have reached the provider after all:
			// the one window in which the customer can get both.
			w.m.fallbackMaybeDelivered.Inc()
		}
		w.log.Info("moved to the next channel", "key", j.n.Key, "from", w.name, "to", next, "reason", l.reason)
	}
	if !hasNext && !done {
		// Stored before the message is terminated (events.deadNow).
		if err := w.events.deadNow(ctx, j, l, now); err != nil {
			w.log.Error("cannot publish the dead event; retrying later", "key", j.n.Key, "err", err)
			return result{job: j, disp: retryHere, at: w.now(), delay: stateRetry}
		}
	}
	// Handed on, or the application told: from here on the job is only
	// given up on, however its next attempt finds it (job.go).
	j.givingUp = &givingUp{target: target, letter: l, fallback: fallback}
	// The give-up mark goes before the termination: a worker checking
	// whether the recipient's earlier messages are settled (takeover.go)
	// finds it, and a terminated message without one would look out for
	// ever (bug 46). A crash between the two brings the message back, and
	// the mark makes it given up on again.
	if j.n.Key != "" {
		if err := w.store.markDone(ctx, j.n.Key, l.reason); err != nil {
			w.log.Error("cannot record that this channel gave up; retrying later", "key", j.n.Key, "err", err)
			return result{job: j, disp: retryHere, at: w.now(), delay: stateRetry}
		}
	}
	if err := w.store.deadLetter(ctx, j, l); err != nil {
		w.log.Error("cannot dead-letter; retrying later", "key", j.n.Key, "err", err)
		return result{job: j, disp: retryHere, at: w.now(), delay: stateRetry}
	}
	w.countDead(l.reason)
	return result{job: j, disp: moveOn, at: w.now()}
}

func (w *Worker) countDead(reason string) {
	w.m.dead.WithLabelValues(reason).Inc()
	w.stats.deadN.Add(1)
}

// recipientDied remembers a dead recipient and tells the application.
func (w *Worker) recipientDied(ctx context.Context, j *job, target string, o Outcome, at time.Time) {
	if w.stillDead(ctx, j, target, o, at) {
		return
	}
	d := DeadRecipient{Channel: w.name, Recipient: target, Reason: o.Reason, Code: o.Code, Description: o.Description, At: at, Key: j.n.Key}
	if err := w.store.state.markDead(ctx, d); err != nil {
		w.log.Error("cannot record the dead recipient", "recipient", target, "err", err)
	}
	w.store.publishEvent(ctx, w.names.SubjectRecipientDead, fmt.Sprintf("%s:dead:%s:%d", w.name, target, j.seq),
		RecipientEvent{Channel: w.name, Recipient: target, Reason: o.Reason, Code: o.Code, Description: o.Description, Key: j.n.Key, At: at})
}

// delivered records the proof of delivery and then acks. The record is
// written asynchronously (records.go): the records of every message in
// flight travel together, and only this attempt waits for its own PubAck
// before the ack, which goes out without waiting for a confirmation (a lost
// ack brings a redelivery, which finds the record). Until the record is
// written, a crash of this worker sends the message twice: that window is
// logged and counted. While JetStream does not answer, the record is tried
// again until it is written or the worker stops, the message kept in flight
// (its lane waits): the record is what stops every other worker — the
// standby pinned after a NATS restart, this one after a crash — from
// sending it again; this process's memory protects only itself.
func (w *Worker) delivered(ctx context.Context, j *job, o Outcome, target string, at time.Time, claim uint64) {
	w.m.sent.Inc()
	w.stats.sent.Add(1)
	w.stats.window.add(at, true)
	if !j.n.CreatedAt.IsZero() {
		w.m.deliverySeconds.Observe(at.Sub(j.n.CreatedAt).Seconds())
	}
	rec := DeliveryRecord{Key: j.n.Key, Channel: w.name, Recipient: target, ProviderID: o.ProviderID, DeliveredAt: at, StreamSeq: j.seq}
	// A record over the send claim goes with the next batch (records.go);
	// one that failed there, or a send without a claim, is written on its
	// own: without a claim with KV Create, so that a cancel mark written
	// meanwhile is found, logged and counted (store.record).
	if claim == 0 || w.records.write(ctx, rec, claim) != nil {
		record := func() error { return w.store.record(ctx, rec, claim) }
		if err := retryTimes(ctx, 3, 100*time.Millisecond, record); err != nil {
			w.m.recordErrors.Inc()
			w.log.Error("sent, but the delivery record cannot be written yet; retrying until JetStream answers", "key", j.n.Key, "err", err)
			// The interval stays short: the record must land as soon as
			// JetStream answers, before a worker pinned after a NATS
			// restart is handed the message.
			if err := retryUntil(ctx, 100*time.Millisecond, 100*time.Millisecond, record, nil); err != nil {
				w.log.Error("sent, but the delivery record was not written before the worker stopped", "key", j.n.Key, "err", err)
				return
			}
			w.log.Info("delivery record written after JetStream came back", "key", j.n.Key)
		}
	}
	if j.delivered > 1 {
		if err := w.store.clearAttempts(ctx, j.n.Key); err != nil {
			w.log.Warn("cannot clear the attempt count", "key", j.n.Key, "err", err)
		}
	}
	w.events.delivered(j.n.Key, w.name, target, rec.ProviderID, at, func() { w.ack(j) })
	w.log.Debug("delivered", "key", j.n.Key, "recipient", target, "provider_id", rec.ProviderID, "seq", j.seq)
}

// recordTimeout bounds the wait for a record's PubAck before it is written
// again, on its own.
const recordTimeout = 5 * time.Second

// ack acknowledges the job (and the duplicate deliveries attached to it)
// without waiting for the server's confirmation: every caller has made sure
// that a redelivery is recognised (the delivery record is stored), so a lost
// ack costs a redelivery acked without a request, not a second send.
func (w *Worker) ack(j *job) {
	j.settling.Store(true)
	if err := j.reply.Ack(); err != nil && !errors.Is(err, natsjs.ErrMsgAlreadyAckd) {
		w.m.recordErrors.Inc()
		w.log.Warn("ack not sent; a redelivery will be recognised and acked", "key", j.n.Key, "seq", j.seq, "err", err)
	}
	for _, d := range j.dups {
		_ = d.reply.Ack()
	}
}
