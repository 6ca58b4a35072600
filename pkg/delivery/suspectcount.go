package delivery

import (
	"context"
	"time"
)

// A takeover ends on its count once the consumer's unacknowledged messages
// are all this worker's own (onTakeoverCheck). The suspects its lane checks
// found are not counted there: the worker holding one may settle it at any
// moment, and counted after that it hid one of that worker's messages
// (bug 56). But a takeover from a worker that died holding messages then
// waits until they come back (the ack wait), and every lane not checked
// yet waits with it, while what it waits for is already known: each of
// the other worker's messages is a suspect its lane waits for anyway.
//
// So when the count leaves no more messages unaccounted for than there are
// suspects, the worker asks the leaders of the record buckets which
// suspects are still unsettled. A message is settled only after its record
// is stored (a delivery record before the ack, a give-up mark before the
// termination: bug 46), so one still unsettled after the reading was
// unacknowledged at it, and it is not this worker's. Those count, once:
// the worker first takes in what arrived (a suspect redelivered here stops
// being one and counts as held; one that arrived after the reading counts
// for neither, and the next reading decides). The leaders are asked, not a
// replica: one behind would call a settled message unsettled, and the
// count would hide another worker's message again.

// minVerifyGap is the least time between two verifications of a
// takeover's suspects: a takeover reads the consumer every 50 ms, and each
// verification costs two requests per suspect.
const minVerifyGap = 200 * time.Millisecond

// suspectVerdict is a verification of a takeover's suspects: which were
// still unsettled after reading was taken; and of the returned messages
// this worker held (returned.go): which were settled.
type suspectVerdict struct {
	reading ackCount
	// ours is what the worker counted as its own at the reading.
	ours            int
	unsettled       map[uint64]bool
	settledReturned map[uint64]bool
	err             error
}

// verifySuspects starts a verification of the takeover's suspects and of
// the returned messages it holds after reading c, with ours of its
// messages counted as this worker's, left foreign messages unaccounted
// for (none, or fewer: returned messages held), when there are at least as
// many suspects with a known key, and none runs.
func (w *Worker) verifySuspects(c ackCount, ours, foreign int) {
	if w.verifying || w.now().Before(w.verifyAfter) {
		return
	}
	var seqs []uint64
	var keys []string
	if foreign > 0 {
		// With nothing unaccounted for, the suspects are not needed: only
		// the returned messages are read, in one batch, not two requests
		// per suspect on the leaders (that made takeovers wait seconds).
		for _, seq := range w.sched.suspectSeqs() {
			if k, ok := w.suspectKeys[seq]; ok {
				seqs, keys = append(seqs, seq), append(keys, k)
			}
		}
		if len(seqs) < foreign {
			return
		}
	}
	rseqs, rkeys := w.sched.returnedHeld(w.heldFrom)
	w.verifying = true
	ctx := w.sendCtx
	go func() {
		v := suspectVerdict{reading: c, ours: ours}
		var settled map[string]bool
		if len(keys) > 0 {
			settled, v.err = w.settledOnLeader(ctx, keys)
		}
		if v.err == nil && len(rkeys) > 0 {
			var rsettled map[string]bool
			rsettled, v.err = w.settledBatch(ctx, rkeys)
			v.settledReturned = make(map[uint64]bool, len(rseqs))
			for i, seq := range rseqs {
				if rsettled[rkeys[i]] {
					v.settledReturned[seq] = true
				}
			}
		}
		if v.err == nil {
			v.unsettled = make(map[uint64]bool, len(seqs))
			for i, seq := range seqs {
				if !settled[keys[i]] {
					v.unsettled[seq] = true
				}
			}
		}
		select {
		case w.verdicts <- v:
		case <-ctx.Done():
		}
	}()
}

// onSuspectsVerified ends the takeover when the unacknowledged messages of
// the verdict's reading are all this worker's or suspects still unsettled;
// returned messages it holds that were settled are not its own (they may
// not be the consumer's any more).
func (w *Worker) onSuspectsVerified(v suspectVerdict) {
	w.verifying = false
	w.verifyAfter = w.now().Add(minVerifyGap)
	if w.stopCheck == nil || v.reading.gen != w.takeoverGen.Load() {
		return // over, or begun again since
	}
	if v.err != nil {
		w.log.Debug("cannot verify the messages a takeover waits for; its count decides", "err", v.err)
		return
	}
	w.takeIncoming()
	if w.stopCheck == nil || v.reading.gen != w.takeoverGen.Load() {
		return // an arrival began it again
	}
	// What the worker held at the reading, not now: a message acked since
	// was one of the reading's unacknowledged messages, and this worker's
	// (before, with the count taken now, every ack during a verification
	// kept the takeover going). A returned message settled elsewhere, now
	// or at the reading, may not have been the consumer's: it does not
	// count.
	waited, settledElsewhere := 0, 0
	for _, settled := range v.settledReturned {
		if settled {
			settledElsewhere++
		}
	}
	ours := v.ours - settledElsewhere
	for _, seq := range w.sched.suspectSeqs() {
		// Only a suspect the consumer had delivered at the reading can
		// have been one of its unacknowledged messages: lanes checked
		// while readings were doubted also wait for messages not yet
		// delivered (doubted.go).
		if v.unsettled[seq] && seq > v.reading.floor && seq <= v.reading.delivered {
			waited++
		}
	}
	if v.reading.pending-ours-waited > 0 {
		return
	}
	w.endOnCount("takeover over: every unacknowledged message is this worker's or one it waits for",
		"unacked", v.reading.pending, "ours", ours, "waited_for", waited, "settled_elsewhere", settledElsewhere)
}

// takeIncoming places every message that has arrived and waits for the
// dispatcher.
func (w *Worker) takeIncoming() {
	for {
		select {
		case j := <-w.incoming:
			w.onArrival(j)
		default:
			return
		}
	}
}

// settledOnLeaderFunc is how a verification reads the records: of the
// suspects from the buckets' leaders (store.settledOnLeader), of the
// returned messages from any replica (store.settledKeys); tests replace
// both.
type settledOnLeaderFunc func(ctx context.Context, keys []string) (map[string]bool, error)
