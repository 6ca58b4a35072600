package jetstream

import (
	"sync"
	"time"
)

// Reconnects records when a NATS connection last came back after a
// disconnect. Connect fills it from its reconnect handler when
// Options.Reconnects is set. A reader that notices a reconnect later, by the
// connection's count (nats.Conn.Stats), learns from it when the reconnect
// happened: a worker that starts, or wakes, seconds after its connection
// came back must not wait as if it had just come back.
type Reconnects struct {
	// Now is the clock the reconnects are timed on; default time.Now.
	Now func() time.Time

	mu    sync.Mutex
	count uint64
	at    time.Time
}

// Record notes that the connection came back for the count-th time (its
// nats.Conn.Stats().Reconnects), now. Connect calls it; an earlier count
// than the last recorded is ignored.
func (r *Reconnects) Record(count uint64) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if count > r.count {
		r.count, r.at = count, t
	}
}

// At returns when the connection came back for the count-th time, if that
// is the last reconnect recorded. A nil Reconnects knows none.
func (r *Reconnects) At(count uint64) (time.Time, bool) {
	if r == nil {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if count == 0 || r.count != count {
		return time.Time{}, false
	}
	return r.at, true
}
