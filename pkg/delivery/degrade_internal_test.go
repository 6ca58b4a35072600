package delivery

import (
	"testing"
	"time"
)

func testDegrader() *degrader {
	cfg := Config{RequestTimeout: 5 * time.Second, StormThreshold: 3, StormWindow: time.Minute, BacklogThreshold: 100}.withDefaults()
	return newDegrader(cfg, 30)
}

// Slow answers halve the rate and double the timeout, a step at a time;
// fast answers bring both back.
func TestDegraderFollowsAnswerTimes(t *testing.T) {
	d := testDegrader()
	now := t0
	feed := func(dur time.Duration) {
		for range minSamples {
			d.observe(dur)
		}
	}
	feed(2 * time.Second)
	st, changed := d.evaluate(now, 0)
	if !changed || !st.Slow || st.Rate != 15 || st.Timeout != 10*time.Second {
		t.Fatalf("after slow answers: %+v (changed %v), want rate 15 and timeout 10s", st, changed)
	}
	feed(2 * time.Second)
	if st, changed = d.evaluate(now.Add(time.Second), 0); changed {
		t.Fatalf("a second step within %v: %+v", stepEvery, st)
	}
	now = now.Add(stepEvery + time.Second)
	for range 10 {
		feed(2 * time.Second)
		st, _ = d.evaluate(now, 0)
		now = now.Add(stepEvery)
	}
	if st.Rate != 3 || st.Timeout != DefaultMaxRequestTimeout {
		t.Fatalf("after a long slow spell: rate %v, timeout %v; want the floor 3 (a tenth) and %v", st.Rate, st.Timeout, DefaultMaxRequestTimeout)
	}
	for range 10 {
		feed(50 * time.Millisecond)
		st, _ = d.evaluate(now, 0)
		now = now.Add(stepEvery)
	}
	if st.Slow || st.Rate != 30 || st.Timeout != 5*time.Second {
		t.Fatalf("after fast answers: %+v, want rate 30 and timeout 5s again", st)
	}
	// Answers between half the threshold and the threshold change nothing.
	feed(700 * time.Millisecond)
	if st, changed = d.evaluate(now, 0); changed || st.Rate != 30 {
		t.Fatalf("with answers of 700ms: %+v (changed %v)", st, changed)
	}
}

// A 429 storm or a backlog makes bulk wait; both end by themselves.
func TestDegraderShedsBulk(t *testing.T) {
	d := testDegrader()
	for i := range 3 {
		d.rateLimited(t0.Add(time.Duration(i) * time.Second))
	}
	if st, _ := d.evaluate(t0.Add(3*time.Second), 0); !st.SheddingBulk || st.SheddingReason != "429 storm" {
		t.Fatalf("after three 429s: %+v, want bulk to wait (429 storm)", st)
	}
	if st, _ := d.evaluate(t0.Add(2*time.Minute), 0); st.SheddingBulk {
		t.Fatalf("a minute after the storm: %+v, want bulk to go again", st)
	}
	if st, _ := d.evaluate(t0.Add(2*time.Minute), 101); !st.SheddingBulk || st.SheddingReason != "backlog" {
		t.Fatalf("with a backlog of 101: %+v, want bulk to wait (backlog)", st)
	}
}

// While bulk waits the scheduler launches transactional lanes only.
func TestSchedulerShedsBulk(t *testing.T) {
	s, _ := newTestScheduler(30)
	s.arrive(bulkJob(1, "100"), t0)
	s.arrive(mkJob(2, "200"), t0)
	s.shedBulk = true
	got := run(s, t0, t0.Add(time.Minute), 10*time.Millisecond)
	if len(got) != 1 || got[0].seq != 2 {
		t.Fatalf("while shedding: sent %v, want only the transactional seq 2", seqs(got))
	}
	s.shedBulk = false
	if got := run(s, t0.Add(time.Minute), t0.Add(2*time.Minute), 10*time.Millisecond); len(got) != 1 || got[0].seq != 1 {
		t.Fatalf("after shedding: sent %v, want the bulk seq 1", seqs(got))
	}
}
