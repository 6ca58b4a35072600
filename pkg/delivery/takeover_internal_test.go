package delivery

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
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

// An arrival that begins a takeover while one is running (the worker was
// pinned, or pinned again, after it began) begins it again: every lane
// waits for a new check in a window read from now on, and the readings and
// lane checks of the takeover as it was are ignored. Found by the long
// cluster chaos run on fb2e19c: the running takeover's window was read
// before the worker was pinned, and a lane it had cleared sent a chat's
// newer message while the worker it took over from still held the older
// one (order 2438 before 2437).
func TestTakeoverBegunAgainChecksEveryLaneInANewWindow(t *testing.T) {
	now := t0
	s, v := newTestScheduler(30)
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
	w.cfg.AckWait = 4 * time.Second

	// A takeover runs, its window (10, 20] read, lane 100 checked and
	// cleared in it.
	s.startTakeover(now.Add(time.Minute), now)
	w.takeoverGen.Store(1)
	w.stopCheck = func() { t.Fatal("the takeover ended") }
	v.apply(first(s.arrive(mkJob(7, "100"), now)))
	v.apply(first(s.arrive(mkJob(8, "200"), now)))
	w.takeoverBounds = &ackCount{floor: 10, delivered: 20, gen: 1}
	w.clearWindow = w.takeoverBounds
	w.clearQueue = append(w.clearQueue, s.takeClears()...)
	if !slices.Equal(w.clearQueue, []string{"100", "200"}) {
		t.Fatalf("lanes to check %v, want [100 200]", w.clearQueue)
	}
	w.clearQueue, w.clearsRunning = nil, 2 // lane 100's check and lane 200's, running
	w.onCleared(cleared{recipient: "100", gen: 1})
	j, _ := s.next(now)
	if j == nil || j.seq != 7 {
		t.Fatalf("lane 100 did not send once cleared: %v", j)
	}
	s.finish(j, now, true, moveOn, 0)

	// The worker is pinned: the takeover begins again.
	now = now.Add(10 * time.Second)
	w.startTakeoverCheck(now)
	if w.takeoverBounds != nil || w.clearWindow != nil || w.takeoverGen.Load() != 2 {
		t.Fatalf("bounds %+v, window %+v, generation %d after the takeover began again; want none yet, 2", w.takeoverBounds, w.clearWindow, w.takeoverGen.Load())
	}
	v.apply(first(s.arrive(mkJob(31, "100"), now)))
	if j, _ := s.next(now); j != nil {
		t.Fatalf("lane 100 sent seq %d before its check in the new window", j.seq)
	}
	// Lane 200's check of the old window comes back: ignored, the lane
	// is checked anew. So is a reading of the consumer taken before.
	w.onCleared(cleared{recipient: "200", gen: 1})
	if j, _ := s.next(now); j != nil {
		t.Fatalf("lane %s sent seq %d on a check of the old window", j.lane, j.seq)
	}
	w.onTakeoverCheck(ackCount{pending: 5, floor: 10, delivered: 20, gen: 1})
	if w.takeoverBounds != nil || w.clearWindow != nil {
		t.Fatalf("a reading of the old takeover fixed the new window: %+v, %+v", w.takeoverBounds, w.clearWindow)
	}
	if got := s.takeClears(); !slices.Contains(got, "100") || !slices.Contains(got, "200") {
		t.Fatalf("lanes to check after the takeover began again %v, want lanes 100 and 200", got)
	}
	// The new window's check of lane 100 clears it.
	w.clearsRunning = 1
	w.onCleared(cleared{recipient: "100", gen: 2})
	if j, _ := s.next(now); j == nil || j.seq != 31 {
		t.Fatalf("lane 100 did not send once checked in the new window: %v", j)
	}
	if w.clearsRunning != 0 {
		t.Errorf("%d checks running, want 0", w.clearsRunning)
	}
}

// A takeover does not count as its own a message whose attempt the worker
// began under a pin it lost: the attempt runs on (a request cannot be
// called back, a send claim is waited for), but the consumer may have
// given the message to the worker pinned meanwhile. Counted, it hid one of
// that worker's messages, and the takeover ended with lanes unchecked.
// Found by the long cluster chaos run on 1075ee7: a consumer leader change
// handed a worker's messages in flight, waiting for their send claims, to
// the other worker; pinned again a second later, the first counted them,
// ended its takeover with 33 lanes unchecked, and sent a chat's order
// 08163 while 08162 was still with the other worker (bug 56). A
// redelivery of the message attached to the attempt under the new pin
// makes it the worker's again.
func TestTakeoverDoesNotCountAttemptsOfALostPin(t *testing.T) {
	now := t0
	s, v := newTestScheduler(30)

	// Under pin epoch 0 the worker sends seq 5 of chat 100.
	v.apply(first(s.arrive(mkJob(5, "100"), now)))
	stale, _ := s.next(now)
	if stale == nil || stale.seq != 5 {
		t.Fatalf("next = %v, want seq 5", stale)
	}
	// The pin moves away while that attempt waits for its send claim
	// (pinMoved), and comes back: a takeover begins, and seq 9 of chat
	// 200 arrives under the new pin.
	eff, _ := s.handBackAll(now)
	v.apply(eff)
	s.losePin()
	now = now.Add(time.Second)
	s.regainPin()
	w, ended := takeoverUnderTest(s, now, 4, 9)
	w.heldFrom = 1
	j := mkJob(9, "200")
	j.pinEpoch = 1
	v.apply(first(s.arrive(j, now)))

	// The consumer counts two unacknowledged messages: seq 9, and the one
	// the other worker holds (seq 5 itself, given to it at the election,
	// or another it received). Only seq 9 is this worker's.
	w.onTakeoverCheck(ackCount{pending: 2, floor: 4, delivered: 9})
	if ended() {
		t.Fatal("the takeover ended counting an attempt of the lost pin as the worker's own")
	}
	if got := s.counts(w.heldFrom).ownInflight; got != 0 {
		t.Fatalf("ownInflight = %d with only an attempt of the lost pin in flight, want 0", got)
	}

	// Seq 5 redelivered to this worker under its new pin joins the attempt:
	// now both are this worker's, and the count balances.
	dup := mkJob(5, "100")
	dup.pinEpoch = 1
	if _, isDup := s.arrive(dup, now); !isDup {
		t.Fatal("the redelivery of the message in flight was not attached to it")
	}
	if got := s.counts(w.heldFrom).ownInflight; got != 1 {
		t.Fatalf("ownInflight = %d after a redelivery under the new pin, want 1", got)
	}
	w.onTakeoverCheck(ackCount{pending: 2, floor: 4, delivered: 9})
	if !ended() {
		t.Fatal("the takeover goes on though every unacknowledged message is the worker's")
	}
}

// A message whose ack has gone out is not counted as the worker's while
// its attempt's result waits for the dispatcher: the consumer no longer
// counts it, and counting it would hide one of another worker's messages.
func TestTakeoverDoesNotCountAttemptsBeingAcked(t *testing.T) {
	s, v := newTestScheduler(30)
	v.apply(first(s.arrive(mkJob(5, "100"), t0)))
	j, _ := s.next(t0)
	if j == nil {
		t.Fatal("nothing to send")
	}
	w, ended := takeoverUnderTest(s, t0, 4, 9)

	// In flight and not acked: the worker's own.
	if got := s.counts(w.heldFrom).ownInflight; got != 1 {
		t.Fatalf("ownInflight = %d, want 1", got)
	}
	// Its ack goes out (Worker.ack) and reaches the server before the
	// reading, which counts one message: another worker's.
	j.settling.Store(true)
	waitsForTheOthersMessage(t, w, ended, "a message being acked")
}

// A suspect a lane check found is not counted as the worker's own: the
// worker that holds it may settle it at any moment (a live worker the pin
// moved away from records and acks what it had in flight), and counted
// after that it would hide one of that worker's messages in a lane not
// checked yet.
func TestTakeoverDoesNotCountSuspects(t *testing.T) {
	s, _ := newTestScheduler(30)
	w, ended := takeoverUnderTest(s, t0, 2, 9)
	s.laneCleared("100", []uint64{3}, t0.Add(20*time.Second), t0)
	if c := s.counts(0); c.parked != 1 || c.ownParked != 0 {
		t.Fatalf("counts %+v with a suspect parked, want it parked and not own", c)
	}
	// The other worker acked seq 3; the one message the consumer counts
	// is another of its messages, in a lane not checked yet.
	waitsForTheOthersMessage(t, w, ended, "a suspect")
}

// dispatcherUnderTest is a worker with what its dispatcher needs for a
// takeover (scheduler s, metrics on reg, channels), on a clock that reads
// *now: the test moves it.
func dispatcherUnderTest(s *scheduler, reg prometheus.Registerer, now *time.Time) *Worker {
	m, err := newMetrics(reg, "telegram")
	if err != nil {
		panic(err) // the metrics' definitions are wrong: every test fails alike
	}
	return &Worker{sched: s, m: m, now: func() time.Time { return *now }, log: slog.New(slog.DiscardHandler),
		clears: make(chan cleared, maxClearing), incoming: make(chan *job, 8)}
}

// takeoverUnderTest returns a worker in a running takeover whose window
// (floor, delivered] is read, its lane checks not started, and a function
// reporting whether the takeover has ended.
func takeoverUnderTest(s *scheduler, now time.Time, floor, delivered uint64) (*Worker, func() bool) {
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
	w.takeoverSince = now
	s.startTakeover(now.Add(time.Minute), now)
	stopped := false
	w.stopCheck = func() { stopped = true }
	w.takeoverBounds = &ackCount{floor: floor, delivered: delivered}
	w.clearWindow = w.takeoverBounds
	return w, func() bool { return stopped }
}

// waitsForTheOthersMessage checks that a takeover holding nothing the
// consumer counts goes on while the consumer counts one unacknowledged
// message, another worker's (what, counted as the worker's own, would
// balance it), and ends once it counts none.
func waitsForTheOthersMessage(t *testing.T, w *Worker, ended func() bool, what string) {
	t.Helper()
	w.onTakeoverCheck(ackCount{pending: 1, floor: 5, delivered: 9})
	if ended() {
		t.Fatalf("the takeover ended counting %s as the worker's own", what)
	}
	w.onTakeoverCheck(ackCount{pending: 0, floor: 9, delivered: 9})
	if !ended() {
		t.Fatal("the takeover goes on with nothing unacknowledged")
	}
}

// A takeover's duration, from its first arrival to its end, goes into
// takeover_duration_seconds under how it ended: an operator sees how long
// lanes waited after a failover, and whether takeovers run out of time.
func TestTakeoverDurationIsMeasured(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	reg := prometheus.NewRegistry()
	w := dispatcherUnderTest(s, reg, &now)
	w.cfg.AckWait = 4 * time.Second

	// begin starts a takeover as startTakeoverCheck does, without the
	// goroutine that reads the consumer: the test gives the readings.
	begin := func() {
		s.startTakeover(now.Add(time.Minute), now)
		w.stopCheck, w.takeoverSince, w.takeoverBounds, w.clearWindow = func() {}, now, nil, nil
	}

	// One ends on its count a second after it began.
	begin()
	now = now.Add(time.Second)
	w.onTakeoverCheck(ackCount{pending: 0, floor: 9, delivered: 9, gen: w.takeoverGen.Load()})
	if w.stopCheck != nil {
		t.Fatal("the takeover goes on with nothing unacknowledged")
	}
	// Another, begun again once, runs out of time 6 s after it began.
	begin()
	now = now.Add(2 * time.Second)
	w.startTakeoverCheck(now) // begun again: still measured from its first arrival
	now = now.Add(4 * time.Second)
	w.endQuarantine(takeoverDeadline)

	want := map[string]float64{"count": 1, "deadline": 6}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "tgnotify_worker_takeover_duration_seconds" {
			continue
		}
		for _, mm := range f.GetMetric() {
			h := mm.GetHistogram()
			if h.GetSampleCount() != 1 {
				t.Errorf("%v: %d takeovers, want 1", mm.GetLabel(), h.GetSampleCount())
			}
			for _, l := range mm.GetLabel() {
				if l.GetName() == "end" {
					got[l.GetValue()] = h.GetSampleSum()
				}
			}
		}
	}
	for end, secs := range want {
		if got[end] != secs {
			t.Errorf("takeover ended by %s measured %v s, want %v (all: %v)", end, got[end], secs, got)
		}
	}
}
