package delivery

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// A failed lane check holds the queued checks back, for longer after each
// failure up to maxClearsBackoff, and a check that succeeds ends the
// backoff: during an election every check fails at once, and retrying
// without a pause would only load the servers that are electing.
func TestFailedLaneCheckHoldsTheQueueBack(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	w := &Worker{sched: s, now: func() time.Time { return now }, log: slog.New(slog.DiscardHandler), clears: make(chan cleared, maxClearing)}
	unavailable := errors.New("nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable")

	// Two checks running fail together: the first starts the pause, the
	// second, failing inside it, does not lengthen it.
	w.clearsRunning = 2
	w.onCleared(cleared{recipient: "1", verify: true, first: 5, err: unavailable})
	w.onCleared(cleared{recipient: "2", verify: true, first: 7, err: unavailable})
	if want := now.Add(minClearsBackoff); !w.clearsRetryAt.Equal(want) {
		t.Fatalf("retry at %v after the first failures, want %v", w.clearsRetryAt.Sub(t0), want.Sub(t0))
	}
	if got := w.startClears(); !got.Equal(w.clearsRetryAt) || w.clearsRunning != 0 || len(w.verifyQueue) != 2 {
		t.Fatalf("inside the pause: startClears = %v, %d running, %d queued; want the retry time, none started, 2 queued",
			got.Sub(t0), w.clearsRunning, len(w.verifyQueue))
	}

	// Each failure after the pause doubles it, up to the cap.
	var pauses []time.Duration
	for range 6 {
		now = w.clearsRetryAt
		w.clearsRunning++
		w.onCleared(cleared{recipient: "1", verify: true, first: 5, err: unavailable})
		pauses = append(pauses, w.clearsRetryAt.Sub(now))
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for i := range want {
		if pauses[i] != want[i] {
			t.Fatalf("pauses %v, want %v", pauses, want)
		}
	}

	// A check that succeeds resets the backoff: the next failure pauses
	// for minClearsBackoff again.
	now = w.clearsRetryAt
	w.clearsRunning++
	w.onCleared(cleared{recipient: "3", verify: true, first: 9})
	w.clearsRunning++
	w.onCleared(cleared{recipient: "1", verify: true, first: 5, err: unavailable})
	if got := w.clearsRetryAt.Sub(now); got != minClearsBackoff {
		t.Errorf("pause after a success and a failure = %v, want %v", got, minClearsBackoff)
	}
}
