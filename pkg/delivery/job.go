package delivery

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// job is one delivery of one stream message to this worker.
type job struct {
	// reply answers JetStream for this delivery; nil in the scheduler's
	// tests. The job keeps what it needs of nats.go's message (reply.go),
	// not the message.
	reply   replier
	seq     uint64 // stream sequence
	subject string
	// delivered is how often the stream has delivered the message,
	// counting this delivery (1 for a first delivery). returned: a
	// redelivery that did not come back from this worker's own park under
	// its pin, so another worker (or an earlier life of this one) may
	// still settle it (returned.go).
	delivered uint64
	returned  bool
	// data is the message's body; header its headers without the pin,
	// packed by packHeader. Both are read again only to dead-letter the
	// message or hand it to the next channel.
	data   []byte
	header string
	// lane is the recipient token of the subject: the key of its lane.
	lane          string
	n             notify.Notification
	transactional bool
	// since is when the notification reached this channel: its creation
	// on the first channel of its route, the fallback's publication on the
	// next ones.
	since    time.Time
	received time.Time
	progress time.Time // last ack-timer reset (delivery or InProgress)
	// pinEpoch is how often the worker had lost the pin when it received
	// the message.
	pinEpoch uint64
	// newPin: the first message under a pin id this worker did not hold
	// before it (pinnedAs): it was just pinned, and takes over from
	// whoever held the pin.
	newPin bool
	// cseq is the consumer sequence of this delivery; gap: the consumer
	// delivered something before this one that never reached this worker
	// (Worker.deliveryGap).
	cseq uint64
	gap  bool
	// settling is set just before the ack or the termination of the
	// message is sent (Worker.ack, store.deadLetter): from then on the
	// consumer may no longer count it as unacknowledged, though the
	// attempt's result has not reached the dispatcher yet.
	settling atomic.Bool
	// dups are later deliveries of the same stream message that arrived
	// while this one was held; they are acked together with it.
	dups []*job
	// Send tokens taken for the current attempt, returned when no request
	// was made after all.
	botRes  *botReservation
	laneRes *rate.Reservation
	// givingUp is set once an attempt has handed the notification to the
	// next channel, or told the application it is dead, and so can only
	// finish giving up on it (giveUp).
	givingUp *givingUp
}

// givingUp is a give-up past its point of no return: the next attempt of
// the job repeats giveUp with the same letter, whatever it would find now.
// By then the next channel may have delivered the notification, and an
// attempt that looked first acked the job as already delivered and left
// the hand-on without its dead letter (CI's short cluster run on 1304e17:
// NOTIFY_DEAD electing a leader as the dead letter was published).
type givingUp struct {
	target   string
	letter   letter
	fallback bool
}

// result is a finished attempt, reported to the dispatcher.
type result struct {
	job   *job
	disp  disposition
	delay time.Duration
	at    time.Time
	// called is true when a request reached (or may have reached) the
	// provider: the send tokens are spent.
	called bool
	// halt, when set, says why the provider's answer stops all sending
	// (credentials rejected).
	halt string
	// pause is a 429 pause to write to the shared state.
	pause *pause
}

// deliveredSince reports whether the message was delivered to this worker
// in pin epoch epoch or later: this delivery, or a redelivery attached to
// it (dups).
func (j *job) deliveredSince(epoch uint64) bool {
	if j.pinEpoch >= epoch {
		return true
	}
	for _, d := range j.dups {
		if d.pinEpoch >= epoch {
			return true
		}
	}
	return false
}
