package delivery

import (
	"context"
	"time"
)

// confirmNotDelivered asks notify_delivered's leader what it holds for a
// job's key before the job is given up on, and returns the entry to decide
// on. The attempt's lookup (last: the revision of the key's last message
// it read) goes with a batched direct get, which any replica answers, a
// replica that is behind too: a node back from a partition answers while
// it catches up, without what was stored meanwhile. Before a send that
// does not matter: the send claim is written over last, and the leader
// refuses it when the key has moved on. A give-up writes nothing over the
// record: it hands the notification to the next channel, and a record it
// did not know of makes that a hand-on of a delivered notification, which
// cannot be taken back (bug 53: a Telegram delivery whose worker was killed
// right after it, handed to email by its successor 14 s later).
//
// settled is set when the job is done with here: the leader has a record,
// a cancel mark or a live worker's claim (settledBy), or cannot be asked
// (an election), and the give-up waits.
func (w *Worker) confirmNotDelivered(ctx context.Context, j *job, e *entry, last uint64, now time.Time) (_ *entry, _ result, settled bool) {
	le, leaderLast, err := w.store.readFromLeader(ctx, j.n.Key)
	if err != nil {
		w.log.Warn("cannot confirm the delivery record with its leader before giving up; retrying later", "key", j.n.Key, "err", err)
		return nil, result{job: j, disp: retryHere, at: now, delay: stateRetry}, true
	}
	if leaderLast == last {
		return e, result{}, false
	}
	w.m.readsBehind.Inc()
	w.log.Info("the delivery record read was behind its leader; deciding on the leader's", "key", j.n.Key,
		"read_revision", last, "leader_revision", leaderLast)
	if r, ok := w.settledBy(ctx, j, le, now); ok {
		return nil, r, true
	}
	return le, result{}, false
}
