package delivery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The run covers a window only when every consumer sequence in it reached
// the worker one after the other, under one pin: a sequence skipped, one
// numbered again, a new pin or a pin lost begins it again.
func TestArrivalRunCovers(t *testing.T) {
	type arrival struct {
		cseq, epoch uint64
		newPin      bool
	}
	seqs := func(from, to, epoch uint64) []arrival {
		var out []arrival
		for c := from; c <= to; c++ {
			out = append(out, arrival{cseq: c, epoch: epoch})
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		arrivals         []arrival
		floor, delivered uint64
		want             bool
	}{
		{"nothing arrived", nil, 0, 0, false},
		{"a new consumer's first deliveries", seqs(1, 300, 0), 0, 256, true},
		{"the window ends beyond the run", seqs(1, 200, 0), 0, 256, false},
		{"the window begins before the run", seqs(5, 300, 0), 0, 256, false},
		{"the window begins just at the run", seqs(5, 300, 0), 4, 256, true},
		{"a gap", append(seqs(1, 10, 0), seqs(12, 300, 0)...), 0, 256, false},
		{"a gap below the window", append(seqs(1, 10, 0), seqs(12, 300, 0)...), 11, 256, true},
		{"numbered again by a leader behind", append(seqs(1, 100, 0), seqs(91, 300, 0)...), 0, 256, false},
		{"numbered again, the window inside", append(seqs(1, 100, 0), seqs(91, 300, 0)...), 90, 256, true},
		{"a new pin", append(seqs(1, 100, 0), append([]arrival{{cseq: 101, newPin: true}}, seqs(102, 300, 0)...)...), 0, 256, false},
		{"a new pin, the window after it", append(seqs(1, 100, 0), append([]arrival{{cseq: 101, newPin: true}}, seqs(102, 300, 0)...)...), 100, 256, true},
		{"a pin lost and back", append(seqs(1, 100, 0), seqs(101, 300, 1)...), 0, 256, false},
		{"an empty window at the run", seqs(1, 300, 0), 256, 256, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r arrivalRun
			for _, a := range tc.arrivals {
				r.note(a.cseq, a.epoch, a.newPin)
			}
			if got := r.covers(tc.floor, tc.delivered); got != tc.want {
				t.Fatalf("covers(%d, %d) = %v after the run [%d, %d], want %v", tc.floor, tc.delivered, got, r.first, r.last, tc.want)
			}
		})
	}
}

// A worker that starts on a new consumer with a backlog takes over on the
// first reading of the consumer that its arrivals cover, although the
// consumer counts more unacknowledged messages than it holds (those on
// their way to it): no lane is checked and nothing waits. Before, it
// checked every recipient that arrived during the takeover, one request
// or more each, and sent nothing else meanwhile: 4.6 s of a 16 s run of
// row 5 of BENCHMARKS.md.
func TestTakeoverEndsWhenEveryDeliveryCameHere(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	reg := prometheus.NewRegistry()
	w := dispatcherUnderTest(s, reg, &now)
	w.takeoverSince = now
	s.startTakeover(now.Add(time.Minute), now)
	stopped := false
	w.stopCheck = func() { stopped = true }
	for c := uint64(1); c <= 300; c++ {
		w.arrivals.note(c, 0, c == 1)
	}
	// A stale park (handed back when a pin was lost) is this worker's to
	// wait for: the message comes back here.
	l := s.laneFor("100", now)
	l.addParked(7, now.Add(time.Minute), true, false)

	now = now.Add(50 * time.Millisecond)
	w.onTakeoverCheck(ackCount{pending: 400, floor: 0, delivered: 256, floorC: 0, deliveredC: 256})
	if !stopped || w.stopCheck != nil {
		t.Fatal("the takeover goes on after a reading whose every delivery came to this worker")
	}
	if w.clearsRunning != 0 || len(w.clearQueue) != 0 || w.clearWindow != nil {
		t.Fatalf("%d lane checks running, %d queued, window %+v: want none", w.clearsRunning, len(w.clearQueue), w.clearWindow)
	}
	if s.inTakeover(now) {
		t.Fatal("the scheduler is still in the takeover")
	}
	if _, ok := l.parkedAt(7); !ok {
		t.Fatal("the stale park was dropped: the lane's later messages would go before it comes back")
	}
	if n := takeoverEnds(t, reg, takeoverDelivered); n != 1 {
		t.Fatalf("%d takeovers ended on their deliveries, want 1", n)
	}
}

// A takeover whose window holds a delivery that did not reach this worker
// (lost on its way, or made to another worker before the pin moved here)
// checks its lanes and ends on the count as before.
func TestTakeoverWithADeliveryElsewhereChecksItsLanes(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
	w.takeoverSince = now
	s.startTakeover(now.Add(time.Minute), now)
	stopped := false
	w.stopCheck = func() { stopped = true }
	for c := uint64(1); c <= 300; c++ {
		if c != 11 {
			w.arrivals.note(c, 0, c == 1)
		}
	}
	w.onTakeoverCheck(ackCount{pending: 400, floor: 0, delivered: 256, floorC: 0, deliveredC: 256})
	if stopped {
		t.Fatal("the takeover ended although delivery 11 never reached this worker")
	}
	if w.clearWindow == nil || w.clearWindow.delivered != 256 {
		t.Fatalf("window %+v: want the lanes checked in (0, 256]", w.clearWindow)
	}
}

// takeoverEnds is how many takeovers ended as end says, from the
// takeover_duration_seconds histogram on reg.
func takeoverEnds(t *testing.T, reg *prometheus.Registry, end string) uint64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "tgnotify_worker_takeover_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "end" && lp.GetValue() == end {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
