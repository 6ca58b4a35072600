package delivery

import (
	"slices"
	"time"

	"golang.org/x/time/rate"
)

// parkedMsg is a message of a lane that went back to the stream with a delay
// and has not come back yet.
type parkedMsg struct {
	seq      uint64
	deadline time.Time // when JetStream redelivers it
	// stale: parked before this worker lost the pin, or while it had none.
	// The worker pinned meanwhile may have settled it: a takeover does not
	// count it as held here (scheduler.losePin).
	stale bool
	// suspect: not parked by this worker but found out by a takeover's or
	// a hold's check (scheduler.suspect): it comes back, or is settled by
	// the worker that holds it, at no time this worker chose. Later
	// messages of the lane wait behind it in memory, not back in the
	// stream (lane.queueBehind).
	suspect bool
}

// lane is one recipient's ordered queue. The scheduler owns it.
//
// Invariants: queue is sorted by stream sequence; every queued sequence is
// lower than every parked one that is not a suspect (a message later than
// this worker's own park is parked too, behind it; one later than only
// suspects waits in the queue: queueBehind); at most one message of the
// lane is in flight, and it was the head of the queue.
type lane struct {
	key      string
	queue    []*job
	inflight *job
	parked   []parkedMsg // sorted by seq
	limiter  *rate.Limiter

	// heap bookkeeping (see laneHeap). readyAt and headSeq are the lane's
	// keys in its heap, set when it is pushed: a heap compares them in the
	// lane itself, not in its head job, one cache line instead of three.
	heapIdx int
	heap    *laneHeap
	readyAt time.Time
	headSeq uint64

	// notBefore delays the next attempt after the attempt could not be
	// made (JetStream unreadable, not admitted).
	notBefore time.Time

	// holdUntil is the Until last written to the shared hold record; zero
	// when no record is written.
	holdUntil time.Time
	touched   time.Time
	// cleared: checked since the last takeover (scheduler.laneCleared).
	cleared bool
	// verify is a hold left by another worker (or an earlier life of this
	// one) that the worker has yet to check: until then the lane does not
	// send (scheduler.holdVerified).
	verify *hold
	// recheckAt is when the lane, waiting behind suspects of a takeover,
	// next checks whether they were settled meanwhile; zero when it does
	// not (scheduler.recheckSuspects). recheckGap doubles after each
	// check; rechecking marks the check running as one of them.
	recheckAt  time.Time
	recheckGap time.Duration
	rechecking bool
}

// chatSlackFraction is the share of a recipient's interval by which a send
// may take its lane's token before the instant it is launched; see tokenDue.
const chatSlackFraction = 20

// tokenDue is the instant at which a send launched at now takes its lane's
// token: when the token became due (readyAt), so that a send launched a
// little late — waiting for the channel-wide slot, or for a timer that fired
// late — does not push the recipient's next send back by as much, which
// would leave a busy recipient below its rate for good. It is never earlier
// than a twentieth of the lane's interval before now, so two sends of a lane
// are never closer than 95% of its interval, while over time the lane keeps
// exactly its rate.
func (l *lane) tokenDue(now time.Time) time.Time {
	slack := time.Duration(float64(time.Second) / float64(l.limiter.Limit()) / chatSlackFraction)
	if earliest := now.Add(-slack); l.readyAt.Before(earliest) {
		return earliest
	}
	if l.readyAt.After(now) {
		return now
	}
	return l.readyAt
}

// interval is the time between two sends the lane's limit allows.
func (l *lane) interval() time.Duration {
	return time.Duration(float64(time.Second) / float64(l.limiter.Limit()))
}

// insert adds j in sequence order. A redelivery of a message already queued
// (or in flight) is attached to it and reported as a duplicate.
func (l *lane) insert(j *job) (dup bool) {
	if l.inflight != nil && l.inflight.seq == j.seq {
		l.inflight.dups = append(l.inflight.dups, j)
		return true
	}
	i, found := slices.BinarySearchFunc(l.queue, j.seq, func(q *job, seq uint64) int { return cmpU64(q.seq, seq) })
	if found {
		l.queue[i].dups = append(l.queue[i].dups, j)
		return true
	}
	l.queue = slices.Insert(l.queue, i, j)
	return false
}

// parkedIndex finds seq in the parked set: its index, or where it would go.
func (l *lane) parkedIndex(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(l.parked, seq, func(p parkedMsg, seq uint64) int { return cmpU64(p.seq, seq) })
}

// unpark removes seq from the parked set and returns it; found is false
// when it was not there.
func (l *lane) unpark(seq uint64) (p parkedMsg, found bool) {
	i, found := l.parkedIndex(seq)
	if found {
		p = l.parked[i]
		l.parked = slices.Delete(l.parked, i, i+1)
	}
	return p, found
}

// addParked records that seq went back to the stream until deadline
// (suspect: that another worker may hold it until then).
func (l *lane) addParked(seq uint64, deadline time.Time, stale, suspect bool) {
	i, found := l.parkedIndex(seq)
	if found {
		l.parked[i].deadline, l.parked[i].stale, l.parked[i].suspect = deadline, stale, suspect
		return
	}
	l.parked = slices.Insert(l.parked, i, parkedMsg{seq: seq, deadline: deadline, stale: stale, suspect: suspect})
}

// parkedAt returns the lane's parked entry for seq.
func (l *lane) parkedAt(seq uint64) (*parkedMsg, bool) {
	i, found := l.parkedIndex(seq)
	if !found {
		return nil, false
	}
	return &l.parked[i], true
}

// mustPark reports whether a message with this sequence has to wait behind a
// parked one.
func (l *lane) mustPark(seq uint64) bool {
	return len(l.parked) > 0 && seq > l.parked[0].seq
}

// queueBehind reports whether a message with this sequence that must wait
// behind parked ones waits in the lane's queue instead of going back to
// the stream: when every parked message before it is a suspect. Handed
// back, it would return only after the suspect's deadline (the ack wait),
// though the suspect may come back, or be found settled, at any moment
// (found by TestRepinnedWorkerDoesNotCountStaleParksAsItsOwn: the other
// worker's suspect was settled a second later, the message parked behind
// it came back 20 s later). Messages behind this worker's own parks go
// back to the stream behind them, as before: those return when this worker
// said.
func (l *lane) queueBehind(seq uint64) bool {
	for _, p := range l.parked {
		if p.seq > seq {
			break
		}
		if !p.suspect {
			return false
		}
	}
	return true
}

// lastDeadline is the latest redelivery time of the lane's parked messages.
func (l *lane) lastDeadline() time.Time {
	var t time.Time
	for _, p := range l.parked {
		if p.deadline.After(t) {
			t = p.deadline
		}
	}
	return t
}

// overdue counts the parked messages that should have come back long ago:
// past their deadline by more than grace.
func (l *lane) overdue(now time.Time, grace time.Duration) int {
	n := 0
	for _, p := range l.parked {
		if now.After(p.deadline.Add(grace)) {
			n++
		}
	}
	return n
}

// schedulable reports whether the lane has a message that may be sent once
// the limits allow: none in flight, and its head not behind a parked one (a
// message a previous worker may still hold, found at a takeover).
func (l *lane) schedulable() bool {
	return l.inflight == nil && len(l.queue) > 0 && (len(l.parked) == 0 || l.queue[0].seq < l.parked[0].seq)
}

// holds reports whether the lane has seq queued, in flight or parked.
func (l *lane) holds(seq uint64) bool {
	if l.inflight != nil && l.inflight.seq == seq {
		return true
	}
	if _, ok := slices.BinarySearchFunc(l.queue, seq, func(q *job, seq uint64) int { return cmpU64(q.seq, seq) }); ok {
		return true
	}
	_, ok := l.parkedIndex(seq)
	return ok
}

// holdOver reports whether the lane's written hold is no longer needed:
// nothing of it parked, and no inherited hold left to check.
func (l *lane) holdOver() bool {
	return len(l.parked) == 0 && !l.holdUntil.IsZero() && l.verify == nil
}

// idle reports whether the lane holds nothing and can be dropped.
func (l *lane) idle() bool {
	return l.inflight == nil && len(l.queue) == 0 && len(l.parked) == 0 && l.holdUntil.IsZero() && l.verify == nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// laneHeap is a heap of schedulable lanes. A "waiting" heap orders lanes by
// the time their recipient's limit next allows a send; an "eligible" heap
// holds the lanes allowed to send now, oldest head message (lowest stream
// sequence) first, so that among the recipients that may send, the message
// waiting longest goes first. (Ordering eligible lanes by readiness instead
// starves a busy recipient: having just sent, it is always due later than a
// backlog of recipients that became ready at once, and would wait until that
// backlog is through.)
type laneHeap struct {
	bySeq bool
	lanes []*lane
}

func (h *laneHeap) Len() int { return len(h.lanes) }
func (h *laneHeap) Less(i, j int) bool {
	a, b := h.lanes[i], h.lanes[j]
	if !h.bySeq && !a.readyAt.Equal(b.readyAt) {
		return a.readyAt.Before(b.readyAt)
	}
	return a.headSeq < b.headSeq
}
func (h *laneHeap) Swap(i, j int) {
	h.lanes[i], h.lanes[j] = h.lanes[j], h.lanes[i]
	h.lanes[i].heapIdx = i
	h.lanes[j].heapIdx = j
}
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	l.heapIdx, l.heap = len(h.lanes), h
	h.lanes = append(h.lanes, l)
}
func (h *laneHeap) Pop() any {
	old := h.lanes
	l := old[len(old)-1]
	old[len(old)-1] = nil
	h.lanes = old[:len(old)-1]
	l.heapIdx, l.heap = -1, nil
	return l
}
