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
	ours      int
	unsettled map[uint64]bool
	// settledLanes are the lanes of the returned messages held at the
	// reading that were settled: by another worker, or an earlier life of
	// this one.
	settledLanes []string
	// returned is how many returned messages were read; took, how long
	// the reads took (both logged when the verdict does not end the
	// takeover).
	returned int
	took     time.Duration
	err      error
}

// verifySuspects starts a verification of the takeover's suspects and of
// the returned messages it holds after reading c, with ours of its
// messages counted as this worker's, left foreign messages unaccounted
// for, when there are at least as many suspects with a known key, and none
// runs. With none unaccounted for (a balanced count), returned are the
// returned messages held (returnedHeld, which the caller has just walked
// the lanes for), and only their records are read; otherwise they are
// found here, once it is known that a verification starts.
func (w *Worker) verifySuspects(c ackCount, ours, foreign int, returned []heldReturn) {
	if w.verifying || w.now().Before(w.verifyAfter) {
		if foreign <= 0 {
			// A count that balances but must wait: logged to tell this wait
			// from a count that does not balance.
			w.log.Debug("a takeover's count balances; its returned messages wait for a verification",
				"returned", len(returned), "verifying", w.verifying)
		}
		return
	}
	var seqs []uint64
	var keys []string
	if foreign > 0 {
		if len(w.suspectKeys) < foreign {
			// Too few suspects are known to account for them, whichever
			// are parked: no walk of the lanes. A takeover of a backlog
			// reads the consumer every 50 ms while the messages it has
			// delivered and this worker not yet received keep the count
			// from balancing; walking every lane at each reading cost
			// 3% of the worker's CPU in the ceiling benchmark (row 5).
			return
		}
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
		returned = w.sched.returnedHeld(w.heldFrom)
	}
	w.verifying = true
	ctx := w.sendCtx
	started := w.now()
	go func() {
		v := suspectVerdict{reading: c, ours: ours, returned: len(returned)}
		var settled map[string]bool
		if len(keys) > 0 {
			settled, v.err = w.settledOnLeader(ctx, keys)
		}
		if v.err == nil && len(returned) > 0 {
			rkeys := make([]string, len(returned))
			for i, r := range returned {
				rkeys[i] = r.key
			}
			var rsettled map[string]bool
			rsettled, v.err = w.settledBatch(ctx, rkeys)
			for _, r := range returned {
				if rsettled[r.key] {
					v.settledLanes = append(v.settledLanes, r.lane)
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
		v.took = w.now().Sub(started)
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
	waited := 0
	ours := v.ours - len(v.settledLanes)
	for _, seq := range w.sched.suspectSeqs() {
		// Only a suspect the consumer had delivered at the reading can
		// have been one of its unacknowledged messages: lanes checked
		// while readings were doubted also wait for messages not yet
		// delivered (doubted.go).
		if v.unsettled[seq] && seq > v.reading.floor && seq <= v.reading.delivered {
			waited++
		}
	}
	if left := v.reading.pending - ours - waited; left > 0 {
		w.log.Debug("a verification leaves messages of the reading unaccounted for; the takeover goes on",
			"unacked", v.reading.pending, "ours", ours, "waited_for", waited, "unaccounted", left,
			"returned", v.returned, "settled_elsewhere", len(v.settledLanes), "took", v.took,
			"settled_lanes_wait_on", w.sched.laneWaits(v.settledLanes, w.now()))
		return
	}
	w.endOnCount("takeover over: every unacknowledged message is this worker's or one it waits for",
		"unacked", v.reading.pending, "ours", ours, "waited_for", waited, "settled_elsewhere", len(v.settledLanes),
		"verification_took", v.took)
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
