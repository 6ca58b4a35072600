package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// suspectCountUnderTest is a worker in a takeover whose window is (4, 9]:
// its lane 100 waits for suspect 5 (key k5), found by its check; lane 200
// holds seq 9 and is not checked yet. settled says which keys the records'
// leaders call settled.
func suspectCountUnderTest(t *testing.T, settled map[string]bool) (*Worker, func() bool) {
	t.Helper()
	now := t0
	s, v := newTestScheduler(30)
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
	w.sendCtx, w.verdicts, w.suspectKeys, w.takeoverSince = context.Background(), make(chan suspectVerdict, 1), map[uint64]string{}, now
	w.persist = newPersister(newSharedState(nil, "telegram", w.log, nil), nil, func() bool { return true }, w.log)
	w.settledOnLeader = func(_ context.Context, keys []string) (map[string]bool, error) {
		out := map[string]bool{}
		for _, k := range keys {
			out[k] = settled[k]
		}
		return out, nil
	}
	w.cfg.AckWait, w.cfg.TakeoverGap = 4*time.Second, time.Hour
	w.lastArrival = now
	s.startTakeover(now.Add(time.Minute), now)
	ended := false
	w.stopCheck = func() { ended = true }
	w.takeoverBounds = &ackCount{floor: 4, delivered: 9}
	w.clearWindow = w.takeoverBounds
	v.apply(first(s.arrive(mkJob(9, "200"), now)))
	v.apply(s.laneCleared("100", []uint64{5}, now.Add(4*time.Second), now))
	w.suspectKeys[5] = "k5"
	return w, func() bool { return ended }
}

// verify gives the takeover reading c and applies the verification it
// starts, if it starts one; it reports whether one ran.
func verify(t *testing.T, w *Worker, c ackCount) bool {
	t.Helper()
	w.onTakeoverCheck(c)
	if !w.verifying {
		return false
	}
	select {
	case v := <-w.verdicts:
		w.onSuspectsVerified(v)
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict")
	}
	return true
}

// A takeover whose only unaccounted message is a suspect that the records'
// leaders still call unsettled ends: every lane not checked yet may send,
// and the suspect's lane waits for it as before.
func TestTakeoverEndsWhenItWaitsOnlyForUnsettledSuspects(t *testing.T) {
	w, ended := suspectCountUnderTest(t, map[string]bool{"k5": false})
	if !verify(t, w, ackCount{pending: 2, floor: 4, delivered: 9}) {
		t.Fatal("no verification of the suspect")
	}
	if !ended() {
		t.Fatal("the takeover goes on though its one unaccounted message is the suspect it waits for")
	}
	if s := w.sched.suspectSeqs(); len(s) != 1 || s[0] != 5 {
		t.Fatalf("suspects %v after the takeover, want lane 100 still waiting for 5", s)
	}
}

// A suspect the records call settled is not unacknowledged any more: the
// unaccounted message is another one, in a lane not checked yet, and the
// takeover goes on (bug 56: counted, a settled suspect hid it).
func TestTakeoverDoesNotCountSettledSuspects(t *testing.T) {
	w, ended := suspectCountUnderTest(t, map[string]bool{"k5": true})
	verify(t, w, ackCount{pending: 2, floor: 4, delivered: 9})
	if ended() {
		t.Fatal("the takeover ended counting a settled suspect")
	}
}

// A suspect that came back to this worker before the reading, still in its
// queue of arrivals, is counted once: taken in first, it is held here and
// no longer a suspect. Counted as both it would hide the other worker's
// message in a lane not checked yet.
func TestTakeoverCountsASuspectThatCameBackOnce(t *testing.T) {
	w, ended := suspectCountUnderTest(t, map[string]bool{"k5": false})
	j := mkJob(5, "100")
	w.incoming <- j
	w.received.Add(1)
	// The consumer counts 9 and 5, here, and one more, the other worker's.
	c := ackCount{pending: 3, floor: 4, delivered: 9, received: w.received.Load()}
	verify(t, w, c)
	if ended() {
		t.Fatal("the takeover ended counting a suspect that came back twice")
	}
	if s := w.sched.suspectSeqs(); len(s) != 0 {
		t.Fatalf("suspects %v, want none: 5 came back", s)
	}
}

// A verification that cannot reach the leaders decides nothing.
func TestTakeoverGoesOnWhenSuspectsCannotBeVerified(t *testing.T) {
	w, ended := suspectCountUnderTest(t, nil)
	w.settledOnLeader = func(context.Context, []string) (map[string]bool, error) {
		return nil, context.DeadlineExceeded
	}
	verify(t, w, ackCount{pending: 2, floor: 4, delivered: 9})
	if ended() {
		t.Fatal("the takeover ended on a verification that failed")
	}
}
