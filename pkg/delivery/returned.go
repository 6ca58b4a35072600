package delivery

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

// returnedHeld returns the keys of the returned messages this worker
// counts as its own: queued, or in flight under its pin and not being
// acked (scheduler.ownInflight).
func (s *scheduler) returnedHeld(heldFrom uint64) (keys []string) {
	for _, l := range s.lanes {
		for _, j := range l.queue {
			if j.returned {
				keys = append(keys, j.n.Key)
			}
		}
		if j := l.inflight; j != nil && j.returned && j.deliveredSince(heldFrom) && !j.settling.Load() {
			keys = append(keys, j.n.Key)
		}
	}
	return keys
}
