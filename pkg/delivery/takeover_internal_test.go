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

// A takeover does not decide from a reading of the consumer that cannot be
// right: fewer unacknowledged messages than the worker itself holds, or a
// delivered sequence or ack floor below the takeover's first reading (a
// consumer leader elected a moment before). Found by the long cluster
// chaos run on 5b7773a: a reading of 0 unacknowledged, while the worker
// held 28, ended a takeover, and two chats' new messages went out before
// the ones a killed worker had held (bug 50).
func TestTakeoverIgnoresAReadingThatCannotBeRight(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	w := &Worker{sched: s, now: func() time.Time { return now }, log: slog.New(slog.DiscardHandler),
		clears: make(chan cleared, maxClearing), incoming: make(chan *job, 8)}
	for range 3 { // the worker holds three messages
		w.incoming <- &job{}
	}
	s.startTakeover(now.Add(time.Minute), now)
	stopped := false
	w.stopCheck = func() { stopped = true }

	w.onTakeoverCheck(ackCount{pending: 5, floor: 10, delivered: 20})
	if w.takeoverBounds == nil || w.takeoverBounds.delivered != 20 {
		t.Fatalf("bounds %+v after the first reading, want its window (10, 20]", w.takeoverBounds)
	}
	for _, c := range []ackCount{
		{pending: 0, floor: 10, delivered: 20}, // fewer than the worker holds
		{pending: 3, floor: 9, delivered: 20},  // an ack floor gone back
		{pending: 3, floor: 10, delivered: 19}, // a delivered sequence gone back
	} {
		w.onTakeoverCheck(c)
		if stopped || w.stopCheck == nil {
			t.Fatalf("the takeover ended on the reading %+v", c)
		}
	}
	w.onTakeoverCheck(ackCount{pending: 3, floor: 12, delivered: 25})
	if !stopped || w.stopCheck != nil {
		t.Fatal("the takeover goes on after a reading with every unacknowledged message the worker's own")
	}
}

func TestPlausibleReading(t *testing.T) {
	first := &ackCount{pending: 9, floor: 100, delivered: 200}
	for _, tc := range []struct {
		c     ackCount
		ours  int
		first *ackCount
		want  bool
	}{
		{ackCount{pending: 3}, 3, nil, true},
		{ackCount{pending: 2}, 3, nil, false},
		{ackCount{pending: 0}, 0, nil, true},
		{ackCount{pending: 5, floor: 100, delivered: 200}, 1, first, true},
		{ackCount{pending: 5, floor: 150, delivered: 260}, 1, first, true},
		{ackCount{pending: 5, floor: 99, delivered: 260}, 1, first, false},
		{ackCount{pending: 5, floor: 150, delivered: 199}, 1, first, false},
	} {
		if got := plausibleReading(tc.c, tc.ours, tc.first); got != tc.want {
			t.Errorf("plausibleReading(%+v, %d, %+v) = %v, want %v", tc.c, tc.ours, tc.first, got, tc.want)
		}
	}
}
