package delivery

import (
	"context"
	"time"
)

// A takeover decides nothing from a reading of the consumer that cannot be
// the consumer as it is (plausibleReading, bug 50), and its lane checks
// used to wait for the first reading that could be, since that fixes their
// window (F, D]. But readings can stay doubted for seconds: after a
// consumer leader change in the long cluster chaos run on 1587072 the
// worker counted one message more than the consumer did at every reading
// for 13 s, until the next leader change, and sent nothing meanwhile; the
// other worker was not pinned, so no message went out at all. Only the
// takeover's deadline (ack wait and grace, 18 s there) would have ended it.
//
// So while readings are doubted the lane checks read a window that does
// not depend on the consumer's count: from the reading's ack floor up to
// the stream's last sequence, read from the stream's leader. Whatever
// another worker may still hold was delivered, so it lies at or below the
// stream's last sequence; and an ack floor only advances as acks are
// applied, so a leader that is behind reports one lower than the true
// floor, which widens the window, never narrows it. A reading with nothing
// delivered is a consumer state not loaded yet (a leader just elected
// answered 0, 0, 0 in several runs): it bounds nothing, and the worker
// waits for the next. The wider window also finds messages not delivered
// yet: their lanes wait for them, which is what order asks anyway (each
// arrives here and takes its place), and a takeover's count leaves them
// out (onSuspectsVerified counts only suspects the reading had delivered).
// The count still ends the takeover only on a reading that could be right.

// windowWhileDoubted gives the running takeover's lane checks a window
// after the doubted reading c, when they have none yet: the first such
// reading asks for the stream's last sequence, and the next one, bringing
// it, starts the checks.
func (w *Worker) windowWhileDoubted(c ackCount) {
	if w.clearWindow != nil || c.delivered == 0 {
		return
	}
	if c.last == 0 {
		w.wantStreamLast.Store(true)
		return
	}
	w.wantStreamLast.Store(false)
	w.clearWindow = &ackCount{floor: c.floor, delivered: max(c.delivered, c.last), gen: c.gen}
	w.log.Info("taking over while the consumer's readings are doubted: checking each recipient's messages up to the stream's last sequence",
		"ack_floor", c.floor, "delivered", c.delivered, "stream_last", c.last, "unacked", c.pending)
	w.startClears()
}

// streamLast reads the last sequence of the consumer's stream from the
// stream's leader, which has stored every message a consumer can have
// delivered; 0 when no leader answered (an election: a replica answers
// for a stream without one, and it may be behind).
func (w *Worker) streamLast(ctx context.Context) uint64 {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := w.js.Stream(qctx, w.streamOf(w.res.Consumer))
	if err != nil {
		w.log.Debug("cannot read the stream's last sequence for a takeover's lane checks", "err", err)
		return 0
	}
	info := s.CachedInfo()
	if info.Cluster != nil && info.Cluster.Leader == "" {
		// A replica answered for a stream with no leader: it may not
		// have stored the last messages yet.
		return 0
	}
	return info.State.LastSeq
}
