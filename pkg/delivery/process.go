package delivery

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// resultKind is what the dispatcher must do after a job's attempt.
type resultKind int

const (
	// resDone: the message was acked or dead-lettered; the lane moves on.
	resDone resultKind = iota
	// resDeadChat: dead-lettered, and the chat is now known dead.
	resDeadChat
	// resNoCall: nothing was sent (breaker open, state unreadable); the
	// message goes back to the head of its lane without spending an
	// attempt, and the lane waits delay before trying again.
	resNoCall
	// resRetryAfter: Telegram answered 429; pause everything for delay.
	resRetryAfter
	// resBackoff: a transient failure; the message retries after delay.
	resBackoff
	// resHalt: the token was rejected; stop sending.
	resHalt
	// resCanceled: the worker is stopping.
	resCanceled
)

// result is a finished attempt, reported to the dispatcher.
type result struct {
	job    *job
	kind   resultKind
	delay  time.Duration
	at     time.Time
	called bool // a request reached (or may have reached) Telegram
}

// stateRetry is how long a lane waits after JetStream could not be read or
// written (a NATS outage) before it tries again.
const stateRetry = time.Second

// maxMigrationHops bounds how many migrations one send follows.
const maxMigrationHops = 3

// process makes one attempt at a job: it skips what must not be sent (dead
// chat, expired, already delivered), calls sendMessage through the circuit
// breaker, and carries out the outcome that needs I/O (delivery record and
// ack, dead letter, attempt count). It runs on its own goroutine; what
// changes the dispatcher's state is reported in the result.
func (w *Worker) process(ctx context.Context, j *job, target int64) result {
	now := w.now()
	done := result{job: j, kind: resDone, at: now}
	if dc, ok := w.state.deadChat(target); ok {
		return w.finishDead(ctx, j, letter{reason: dc.Reason, code: dc.Code,
			description: fmt.Sprintf("chat %d was found dead at %s: %s", target, dc.At.Format(time.RFC3339), dc.Description)}, false)
	}
	if j.n.Expired(now) {
		return w.finishDead(ctx, j, letter{reason: ReasonExpired,
			description: "notification expired at " + j.n.ExpiresAt.Format(time.RFC3339) + " before it could be sent"}, false)
	}
	sent, err := w.deliveries.delivered(ctx, j.n.Key)
	if err != nil {
		w.log.Warn("cannot read the delivery record; retrying later", "key", j.n.Key, "err", err)
		return result{job: j, kind: resNoCall, at: now, delay: stateRetry}
	}
	if sent {
		w.ack(ctx, j)
		w.m.alreadyDelivered.Inc()
		w.already.Add(1)
		w.log.Info("already delivered; acked without sending", "key", j.n.Key, "seq", j.seq)
		return done
	}

	for hop := 0; ; hop++ {
		params := botapi.SendMessageParams{
			ChatID:              target,
			Text:                j.n.Text,
			ParseMode:           botapi.ParseMode(j.n.ParseMode),
			DisableNotification: j.n.DisableNotification,
			ProtectContent:      j.n.ProtectContent,
			AllowPaidBroadcast:  w.cfg.PaidBroadcast,
		}
		start := w.now()
		if until := w.state.pausedUntil(); start.Before(until) {
			// A 429 answered to a request in flight since this one was
			// launched: no request inside the pause, not even this one.
			return result{job: j, kind: resNoCall, at: start, delay: until.Sub(start)}
		}
		msg, err := w.breaker.Execute(func() (*botapi.Message, error) { return w.api.SendMessage(ctx, params) })
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			return result{job: j, kind: resNoCall, at: start}
		}
		end := w.now()
		d := botapi.Classify(err)
		w.m.sendSeconds.Observe(end.Sub(start).Seconds())
		w.m.requests.WithLabelValues(d.Action.String()).Inc()
		called := result{job: j, at: end, called: true}

		switch d.Action {
		case botapi.ActionDelivered:
			w.delivered(ctx, j, msg, target, end)
			called.kind = resDone
			return called

		case botapi.ActionRetryAfter:
			// Paused here at once, not only when the dispatcher reads the
			// result, so that requests launched meanwhile are not sent
			// (the check above); the dispatcher persists it.
			pauseOp{p: pause{Until: end.Add(d.RetryAfter), Reason: "429 for chat " + itoa(target)}}.applyLocal(w.state)
			w.m.rateLimited.Inc()
			w.limited.Add(1)
			w.log.Warn("Telegram rate limit hit: pausing every request", "retry_after", d.RetryAfter, "chat_id", target, "key", j.n.Key)
			called.kind, called.delay = resRetryAfter, d.RetryAfter
			return called

		case botapi.ActionMigrate:
			if d.MigrateTo == 0 || d.MigrateTo == target || hop >= maxMigrationHops {
				return w.transient(ctx, j, d, end)
			}
			w.m.migrations.Inc()
			w.log.Info("group migrated to a supergroup; following", "from", target, "to", d.MigrateTo, "key", j.n.Key)
			if err := w.state.markMigrated(ctx, target, d.MigrateTo); err != nil {
				w.log.Error("cannot record the migration", "from", target, "to", d.MigrateTo, "err", err)
			}
			w.publishEvent(ctx, jetstream.SubjectChatMigrated, "chat_migrated:"+strconv.FormatInt(target, 10),
				ChatEvent{ChatID: target, Reason: botapi.ReasonMigrated, Code: d.Code, Description: d.Description, MigrateTo: d.MigrateTo, Key: j.n.Key, At: end})
			target = d.MigrateTo
			continue

		case botapi.ActionDead:
			w.m.failures.WithLabelValues(d.Reason).Inc()
			w.window.add(end, false)
			r := w.finishDead(ctx, j, letter{reason: d.Reason, code: d.Code, description: d.Description, attempts: w.attemptsSoFar(ctx, j) + 1}, true)
			if r.kind == resDone && d.ChatDead() {
				w.chatDied(ctx, j, target, d, end)
				r.kind = resDeadChat
			}
			r.called = true
			return r

		case botapi.ActionHalt:
			w.log.Error("Telegram rejected the bot token: sending stopped; fix the token and restart, nothing is dead-lettered",
				"code", d.Code, "reason", d.Reason, "description", d.Description)
			called.kind = resHalt
			return called

		case botapi.ActionCanceled:
			called.kind = resCanceled
			called.called = d.MaybeDelivered
			return called

		default: // ActionBackoff
			return w.transient(ctx, j, d, end)
		}
	}
}

// transient counts a failed attempt and decides between a retry and a dead
// letter (max_attempts, or expired before the retry could happen).
func (w *Worker) transient(ctx context.Context, j *job, d botapi.Decision, now time.Time) result {
	w.m.failures.WithLabelValues(d.Reason).Inc()
	w.window.add(now, false)
	n := w.attemptsSoFar(ctx, j) + 1
	if n >= w.cfg.MaxAttempts {
		r := w.finishDead(ctx, j, letter{reason: ReasonMaxAttempts, code: d.Code, description: d.Description, attempts: n}, true)
		r.called = true
		return r
	}
	delay := retryDelay(n, w.cfg.BackoffBase, w.cfg.BackoffCap, w.randN)
	if !j.n.ExpiresAt.IsZero() && !now.Add(delay).Before(j.n.ExpiresAt) {
		r := w.finishDead(ctx, j, letter{reason: ReasonExpired, code: d.Code,
			description: fmt.Sprintf("notification expires at %s, before its retry; last error: %s", j.n.ExpiresAt.Format(time.RFC3339), d.Description), attempts: n}, true)
		r.called = true
		return r
	}
	if err := w.attempts.set(ctx, j.n.Key, n); err != nil {
		w.log.Warn("cannot record the attempt count", "key", j.n.Key, "err", err)
	}
	w.retries[min(n, 3)-1].Add(1)
	w.m.retries.WithLabelValues(strconv.Itoa(min(n, 3))).Inc()
	w.log.Warn("send failed; retrying", "key", j.n.Key, "chat_id", j.chat, "attempt", n, "retry_in", delay,
		"reason", d.Reason, "code", d.Code, "description", d.Description, "may_have_been_delivered", d.MaybeDelivered)
	return result{job: j, kind: resBackoff, delay: delay, at: now, called: true}
}

// attemptsSoFar reads the persisted attempt count; a first delivery has none.
func (w *Worker) attemptsSoFar(ctx context.Context, j *job) int {
	if meta, err := j.msg.Metadata(); err == nil && meta.NumDelivered <= 1 {
		return 0
	}
	n, err := w.attempts.get(ctx, j.n.Key)
	if err != nil {
		w.log.Warn("cannot read the attempt count", "key", j.n.Key, "err", err)
	}
	return n
}

// finishDead dead-letters the job. If the dead letter cannot be stored the
// message is retried later instead, without spending an attempt.
func (w *Worker) finishDead(ctx context.Context, j *job, l letter, clearAttempts bool) result {
	if err := w.deadLetter(ctx, j, l); err != nil {
		w.log.Error("cannot dead-letter; retrying later", "key", j.n.Key, "err", err)
		return result{job: j, kind: resNoCall, at: w.now(), delay: stateRetry}
	}
	if clearAttempts {
		if err := w.attempts.clear(ctx, j.n.Key); err != nil {
			w.log.Warn("cannot clear the attempt count", "key", j.n.Key, "err", err)
		}
	}
	return result{job: j, kind: resDone, at: w.now()}
}

// chatDied remembers a dead chat and tells the application.
func (w *Worker) chatDied(ctx context.Context, j *job, chat int64, d botapi.Decision, at time.Time) {
	dc := DeadChat{ChatID: chat, Reason: d.Reason, Code: d.Code, Description: d.Description, At: at, Key: j.n.Key}
	if err := w.state.markDead(ctx, dc); err != nil {
		w.log.Error("cannot record the dead chat", "chat_id", chat, "err", err)
	}
	w.publishEvent(ctx, jetstream.SubjectChatDead, "chat_dead:"+strconv.FormatInt(chat, 10)+":"+strconv.FormatUint(j.seq, 10),
		ChatEvent{ChatID: chat, Reason: d.Reason, Code: d.Code, Description: d.Description, Key: j.n.Key, At: at})
}

// delivered records the proof of delivery and then acks. Until the record
// is written, a crash of this worker sends the message twice: that window is
// logged and counted. While JetStream does not answer, the record is tried
// again until it is written or the worker stops, the message kept in flight
// (its lane waits): the record is what stops every other worker — the
// standby pinned after a NATS restart, this one after a crash — from
// sending it again; this process's memory protects only itself.
func (w *Worker) delivered(ctx context.Context, j *job, msg *botapi.Message, target int64, at time.Time) {
	w.m.sent.Inc()
	w.sent.Add(1)
	w.window.add(at, true)
	if !j.n.CreatedAt.IsZero() {
		w.m.deliverySeconds.Observe(at.Sub(j.n.CreatedAt).Seconds())
	}
	rec := DeliveryRecord{Key: j.n.Key, ChatID: target, DeliveredAt: at, StreamSeq: j.seq}
	if msg != nil {
		rec.MessageID = msg.MessageID
	}
	record := func() error { return w.deliveries.record(ctx, rec) }
	if err := retry(ctx, 3, record); err != nil {
		w.m.recordErrors.Inc()
		w.log.Error("sent, but the delivery record cannot be written yet; retrying until JetStream answers", "key", j.n.Key, "err", err)
		if err := retryUntilDone(ctx, record); err != nil {
			w.log.Error("sent, but the delivery record was not written before the worker stopped", "key", j.n.Key, "err", err)
			return
		}
		w.log.Info("delivery record written after JetStream came back", "key", j.n.Key)
	}
	if meta, err := j.msg.Metadata(); err == nil && meta.NumDelivered > 1 {
		if err := w.attempts.clear(ctx, j.n.Key); err != nil {
			w.log.Warn("cannot clear the attempt count", "key", j.n.Key, "err", err)
		}
	}
	w.ack(ctx, j)
	w.log.Debug("delivered", "key", j.n.Key, "chat_id", target, "message_id", rec.MessageID, "seq", j.seq)
}

// ack acknowledges the job and waits for the server to confirm.
func (w *Worker) ack(ctx context.Context, j *job) {
	err := retry(ctx, 3, func() error {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return j.msg.DoubleAck(actx)
	})
	if err != nil {
		w.m.recordErrors.Inc()
		w.log.Warn("ack not confirmed; a redelivery will be recognised and acked", "key", j.n.Key, "seq", j.seq, "err", err)
	}
	for _, d := range j.dups {
		_ = d.Ack()
	}
}

// retryUntilDone runs f every 100ms until it succeeds or ctx ends. The
// interval stays short: the record must land as soon as JetStream answers,
// before a worker pinned after a NATS restart is handed the message.
func retryUntilDone(ctx context.Context, f func() error) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

// retry runs f up to n times, 100ms apart, until it succeeds or ctx ends.
func retry(ctx context.Context, n int, f func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if err = f(); err == nil {
			return nil
		}
		if i < n-1 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return err
}
