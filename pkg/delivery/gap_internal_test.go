package delivery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A consumer sequence skipped between two deliveries that reached the
// worker is a gap; a late one, a repeated one, or the first ever is not.
func TestDeliveryGap(t *testing.T) {
	w := &Worker{}
	for _, tc := range []struct {
		cseq uint64
		gap  bool
	}{
		{5, false}, // the first this worker sees
		{6, false},
		{8, true},  // 7 never came
		{7, false}, // late: not a gap again
		{9, false},
		{9, false},
		{11, true},
	} {
		if got := w.deliveryGap(tc.cseq); got != tc.gap {
			t.Errorf("deliveryGap(%d) = %v, want %v", tc.cseq, got, tc.gap)
		}
	}
}

// An arrival after a gap begins the takeover again, however recently the
// worker received and under the same pin: a delivery lost with a
// connection leaves a chat's earlier message out with the consumer, and
// its later one must wait for a lane check (bug 57). An arrival without a
// gap does not. delivery_gaps_total counts the gaps.
func TestArrivalAfterAGapBeginsATakeover(t *testing.T) {
	now := t0
	s, _ := newTestScheduler(30)
	reg := prometheus.NewRegistry()
	w := dispatcherUnderTest(s, reg, &now)
	w.cfg.AckWait, w.cfg.TakeoverGap = 4*time.Second, time.Hour
	// A takeover runs (so that beginning it again starts no goroutine).
	s.startTakeover(now.Add(time.Minute), now)
	w.stopCheck = func() {}
	w.lastArrival = now

	w.onArrival(mkJob(10, "100"))
	if g := w.takeoverGen.Load(); g != 0 {
		t.Fatalf("an arrival without a gap began the takeover again (generation %d)", g)
	}
	j := mkJob(12, "100")
	j.gap = true
	w.onArrival(j)
	if g := w.takeoverGen.Load(); g != 1 {
		t.Fatalf("generation %d after an arrival after a gap, want 1: the takeover begun again", g)
	}
	if n := gatheredCounter(t, reg, "tgnotify_worker_delivery_gaps_total"); n != 1 {
		t.Fatalf("delivery_gaps_total = %v after one gap, want 1", n)
	}
}

// gatheredCounter is the value of the counter name (without labels) on
// reg; the test fails if reg has none.
func gatheredCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
