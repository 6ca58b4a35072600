package delivery

import (
	"context"
	"time"
)

// A worker that starts (after a crash, a deploy, or as the standby taking
// over) can receive new messages of a chat before older ones that another
// worker held: those come back only when their ack wait expires, or, for
// messages handed back, in an order JetStream does not guarantee (a
// redelivery that finds no pull request of the pinned client is re-queued at
// the back). Sending the new one first would break the chat's order.
//
// The same holds when this worker is pinned again after it lost the pin to
// another one (a nats-server restart reassigns the pin; the other worker
// died soon after), however short the gap: the other one may hold older
// messages of a chat.
//
// So when messages start arriving after a quiet period or a lost pin, the
// worker asks the consumer how many messages are delivered and
// unacknowledged. If that is more than this worker holds, someone else's
// messages are still out: the worker sends nothing (a "quarantine") until
// they have all arrived and been sorted into their lanes, or until the ack
// wait plus a grace period has passed, by which time JetStream must have
// redelivered them. With nothing outstanding the check costs one
// consumer-info request.

// startTakeoverCheck begins a check and holds sending until it is done.
func (w *Worker) startTakeoverCheck(now time.Time) {
	if w.stopCheck != nil {
		return // one is running
	}
	w.adm.quarantine(now.Add(w.cfg.AckWait + w.parkGrace()))
	w.quarantineDeadline = now.Add(w.cfg.AckWait + w.parkGrace())
	ctx, cancel := context.WithCancel(w.sendCtx)
	w.stopCheck = cancel
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			// Arrivals counted before the request: the server's count
			// includes them, and what arrives after is subtracted again.
			received := w.received.Load()
			qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := w.res.Consumer.Info(qctx)
			qcancel()
			if err == nil {
				select {
				case w.takeover <- ackCount{pending: info.NumAckPending, received: received}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// ackCount is the consumer's count of delivered, unacknowledged messages,
// with this worker's arrival count taken just before the request.
type ackCount struct {
	pending  int
	received uint64
}

// onTakeoverCheck ends the quarantine once the server's unacknowledged
// messages are all accounted for by this worker. What this worker holds now
// is compared with the server's count of a moment ago, so messages that
// arrived in between are not counted as ours: they would hide as many of
// the other worker's (found by TestRepinnedWorkerWaitsForTheOthersMessages).
// Messages acked in between make the wait longer, never shorter.
func (w *Worker) onTakeoverCheck(c ackCount) {
	if w.stopCheck == nil {
		return
	}
	n := w.sched.counts()
	ours := len(w.incoming) + n.held + n.parked + n.inflight
	ours -= int(w.received.Load() - c.received)
	if foreign := c.pending - ours; foreign > 0 {
		w.log.Debug("waiting for messages another worker held", "outstanding", foreign)
		return
	}
	w.endQuarantine()
}

// quarantineExpired reports whether a quarantine is running past its
// deadline: the other worker's messages should have come back by then.
func (w *Worker) quarantineExpired(now time.Time) bool {
	return w.stopCheck != nil && !now.Before(w.quarantineDeadline)
}

func (w *Worker) endQuarantine() {
	w.adm.endQuarantine()
	w.quarantineDeadline = time.Time{}
	if w.stopCheck != nil {
		w.stopCheck()
		w.stopCheck = nil
	}
}
