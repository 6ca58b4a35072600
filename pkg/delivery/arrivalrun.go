package delivery

import "sync"

// arrivalRun is the longest recent run of consumer sequences that reached
// this worker one after the other, without a gap, under one pin: the
// deliveries [first, last] of the consumer all came here. A takeover that
// finds the window of a reading, (ack floor, last delivered] in consumer
// sequences, inside the run can end at once (Worker.onTakeoverCheck):
// every message the consumer holds unacknowledged was last delivered to
// this worker, so no other worker holds one.
//
// That rests on how the consumer numbers deliveries (nats-server's
// consumer.go): each delivery, a redelivery too, takes the next consumer
// sequence; an unacknowledged message keeps the sequence of its first
// delivery as its place (trackPending), and the ack floor stays below the
// lowest such place (moveAckFloor). So every delivery of a message not yet
// acknowledged has a sequence above the floor, and the last delivery of
// each lies in the window.
//
// The run begins again wherever that could mislead: at a sequence skipped
// (a delivery lost on its way, or made to another worker: bug 57), at a
// sequence not above the last (a consumer leader elected with an older
// state numbers again, and the numbers it gives another worker may be
// ones this worker received before), and at a new pin or a pin lost (the
// deliveries made while another worker was pinned are not this worker's,
// whatever their numbers). A worker that starts on a new consumer with a backlog
// takes over in one reading instead of checking every recipient it holds
// (row 5 of BENCHMARKS.md: 4.6 s of a 16 s run with no send at all).
type arrivalRun struct {
	mu          sync.Mutex
	first, last uint64
	// epoch is the pin epoch of the run's deliveries (Worker.pinEpoch).
	epoch uint64
}

// note records a delivery with consumer sequence cseq that reached this
// worker in pin epoch epoch; newPin says it came with a pin this worker had
// not seen. Safe for concurrent use.
func (r *arrivalRun) note(cseq, epoch uint64, newPin bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !newPin && epoch == r.epoch && r.last != 0 && cseq == r.last+1 {
		r.last = cseq
		return
	}
	r.first, r.last, r.epoch = cseq, cseq, epoch
}

// covers reports whether every delivery with a consumer sequence in
// (floor, delivered] reached this worker in the current run. An empty
// window is covered only once the run has begun at or below it.
func (r *arrivalRun) covers(floor, delivered uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first != 0 && r.first <= floor+1 && delivered <= r.last
}
