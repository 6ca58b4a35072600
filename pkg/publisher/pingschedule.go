package publisher

import "time"

// firstPing is how long a wait for a fast batch's acknowledgement lasts
// before the first ping. A flow ack or final PubAck normally comes within
// milliseconds; one that does not was most often lost with NOTIFY's
// leader (a step-down or an election: the new leader does not know the
// batch and answers a ping with "unknown batch id", which ends the round
// and republishes from the first row not acknowledged). Waiting a third of
// AckTimeout for the first ping, as before, kept every delivery waiting
// 3.3 s after a step-down (BENCHMARKS.md, row 7c).
const firstPing = 100 * time.Millisecond

// pingSchedule spaces the pings of one wait for an acknowledgement: the
// first after firstPing, each next one twice as long after the last, at
// most a third of AckTimeout apart. A ping costs the stream one small
// message, and a healthy leader answers it by sending its latest flow ack
// again, so a slow server sees a few more pings, never a batch given up.
type pingSchedule struct {
	next, most time.Duration
}

// newPingSchedule returns the schedule of a wait bounded by timeout.
func newPingSchedule(timeout time.Duration) pingSchedule {
	most := max(timeout/3, time.Millisecond)
	return pingSchedule{next: min(firstPing, most), most: most}
}

// after returns how long to wait for the next ping, and doubles the wait
// after it.
func (s *pingSchedule) after() time.Duration {
	d := s.next
	s.next = min(2*s.next, s.most)
	return d
}

// restart starts the schedule over: an acknowledgement arrived, so the
// next silence is new.
func (s *pingSchedule) restart() {
	s.next = min(firstPing, s.most)
}
