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
// So when messages start arriving after a quiet period, the worker asks the
// consumer how many messages are delivered and unacknowledged. If that is
// more than this worker holds, someone else's messages are still out: the
// worker sends nothing (a "quarantine") until they have all arrived and
// been sorted into their lanes, or until the ack wait plus a grace period has
// passed, by which time JetStream must have redelivered them. With nothing
// outstanding the check costs one consumer-info request.

// startTakeoverCheck begins a check and holds sending until it is done.
func (w *Worker) startTakeoverCheck(now time.Time) {
	if w.stopCheck != nil {
		return // one is running
	}
	w.quarantineUntil = now.Add(w.cfg.AckWait + w.parkGrace())
	ctx, cancel := context.WithCancel(w.sendCtx)
	w.stopCheck = cancel
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := w.res.Consumer.Info(qctx)
			qcancel()
			if err == nil {
				select {
				case w.takeover <- info.NumAckPending:
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

// onTakeoverCheck ends the quarantine once the server's unacknowledged
// messages are all accounted for by this worker.
func (w *Worker) onTakeoverCheck(ackPending int) {
	if w.stopCheck == nil {
		return
	}
	ours := len(w.incoming)
	for _, l := range w.lanes {
		ours += len(l.queue) + len(l.parked)
		if l.inflight != nil {
			ours++
		}
	}
	if foreign := ackPending - ours; foreign > 0 {
		w.log.Debug("waiting for messages another worker held", "outstanding", foreign)
		return
	}
	w.endQuarantine()
}

func (w *Worker) endQuarantine() {
	w.quarantineUntil = time.Time{}
	if w.stopCheck != nil {
		w.stopCheck()
		w.stopCheck = nil
	}
}
