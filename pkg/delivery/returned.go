package delivery

import "time"

// A takeover counts the messages this worker holds as its own share of the
// consumer's unacknowledged ones (ownCountSince). Most are: the consumer
// delivered them here and counts them until this worker acks them. A
// redelivery is different when it did not come back from this worker's
// own park under its pin: the message was delivered before to another
// worker, or to an earlier life of this one, which may still be sending
// it. A consumer leader change hands a live worker's messages in flight to
// the worker pinned next (bug 56), and the first worker still records the
// delivery and acks. The consumer takes an ack from any delivery of a
// message, so from then on it no longer counts a message this worker
// still holds. Counted as this worker's, such a message hides one of
// another worker's messages: the count balances while that message is
// still out, the takeover ends with lanes not checked yet, and one of
// them may send a recipient's later message first.
//
// So before a takeover ends on a count that includes such messages
// ("returned", job.returned), the worker reads their records
// (onSuspectsVerified), and those already settled do not count. They are
// read in batches from any replica (store.settledKeys): one that is
// behind calls a settled message unsettled, which keeps it counted and
// the takeover going, never ends it early.

// heldReturn is a returned message this worker holds: its key, by which
// its record is read, and its lane.
type heldReturn struct {
	key, lane string
}

// returnedHeld returns the returned messages this worker counts as its
// own: queued, or in flight under its pin and not being acked
// (scheduler.ownInflight).
func (s *scheduler) returnedHeld(heldFrom uint64) (held []heldReturn) {
	for _, l := range s.lanes {
		for _, j := range l.queue {
			if j.returned {
				held = append(held, heldReturn{j.n.Key, j.lane})
			}
		}
		if j := l.inflight; j != nil && j.returned && j.deliveredSince(heldFrom) && !j.settling.Load() {
			held = append(held, heldReturn{j.n.Key, j.lane})
		}
	}
	return held
}

// laneWaits says, for a verdict's debug line, what each of the lanes given
// waits on now, counted by kind: a returned message settled elsewhere
// holds the count off balance until its lane acks it at its first attempt
// (the record says delivered), and the long cluster runs on e9c0238 and
// 2f1cf52 found such messages waiting seconds in lanes already checked.
// The kinds, the first that applies: "checking" (the lane's takeover check
// has not ended), "in_flight" (an attempt of the lane runs), "parked" (the
// lane waits for a message parked or out with another worker), "not_before"
// (an attempt could not be made and waits), "chat_rate" (the recipient's
// limiter), "eligible" (the lane waits only for the dispatcher: admission,
// the bot-wide rate or a slot), "gone" (no such lane any more).
func (s *scheduler) laneWaits(lanes []string, now time.Time) map[string]int {
	out := map[string]int{}
	for _, key := range lanes {
		l, ok := s.lanes[key]
		switch {
		case !ok:
			out["gone"]++
		case s.clearing[key]:
			out["checking"]++
		case l.inflight != nil:
			out["in_flight"]++
		case len(l.parked) > 0:
			out["parked"]++
		case l.notBefore.After(now):
			out["not_before"]++
		case l.readyAt.After(now):
			out["chat_rate"]++
		default:
			out["eligible"]++
		}
	}
	return out
}
