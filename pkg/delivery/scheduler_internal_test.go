package delivery

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// These tests drive the scheduler alone, on a synthetic clock: no NATS, no
// HTTP, no goroutines. They run in microseconds whatever the machine is
// doing.

var t0 = time.Unix(1_000_000, 0)

// fakeView is the shared state the scheduler reads.
type fakeView struct {
	holds    map[string]hold
	deadSet  map[string]bool
	recorded []holdChange
}

func (v *fakeView) hold(r string) (hold, bool) { h, ok := v.holds[r]; return h, ok }
func (v *fakeView) dead(r string) bool         { return v.deadSet[r] }

// apply records hold changes the way the persister's local apply does.
func (v *fakeView) apply(eff effects) {
	for _, h := range eff.holds {
		v.recorded = append(v.recorded, h)
		if h.clear {
			delete(v.holds, h.recipient)
		} else {
			v.holds[h.recipient] = h.h
		}
	}
}

// telegramRates: 1 msg/s to a private chat, 20 msg/min to a group (a
// recipient starting with '-').
func telegramRates(r string) rate.Limit {
	if strings.HasPrefix(r, "-") {
		return rate.Limit(20.0 / 60)
	}
	return 1
}

func newTestScheduler(botRate float64) (*scheduler, *fakeView) {
	return newTestSchedulerStrict(botRate, false)
}

// newTestSchedulerStrict is newTestScheduler with schedConfig.strictRate.
func newTestSchedulerStrict(botRate float64, strict bool) (*scheduler, *fakeView) {
	v := &fakeView{holds: map[string]hold{}, deadSet: map[string]bool{}}
	s := newScheduler(schedConfig{rate: rate.Limit(botRate), strictRate: strict, laneRate: telegramRates, laneCap: 100, parkGrace: 40 * time.Second, recheck: 10 * time.Second}, v)
	return s, v
}

func mkJob(seq uint64, lane string) *job {
	return &job{seq: seq, lane: lane, transactional: true, received: t0, progress: t0}
}

func bulkJob(seq uint64, lane string) *job {
	j := mkJob(seq, lane)
	j.transactional = false
	return j
}

// launch records one send.
type launch struct {
	at  time.Time
	seq uint64
	r   string
}

// run launches everything the scheduler allows from now until until, each
// attempt answered after rtt, and returns the launches in order.
func run(s *scheduler, now, until time.Time, rtt time.Duration) []launch {
	type flying struct {
		j   *job
		end time.Time
	}
	var out []launch
	var inflight []flying
	for !now.After(until) {
		for {
			j, _ := s.next(now)
			if j == nil {
				break
			}
			out = append(out, launch{at: now, seq: j.seq, r: j.lane})
			inflight = append(inflight, flying{j, now.Add(rtt)})
		}
		// Next event: an answer, or a wake-up.
		_, wake := s.next(now)
		nextAt := wake
		for _, f := range inflight {
			if nextAt.IsZero() || f.end.Before(nextAt) {
				nextAt = f.end
			}
		}
		if nextAt.IsZero() {
			break
		}
		now = later(nextAt, now)
		kept := inflight[:0]
		for _, f := range inflight {
			if !f.end.After(now) {
				s.finish(f.j, now, true, moveOn, 0)
			} else {
				kept = append(kept, f)
			}
		}
		inflight = kept
	}
	return out
}

func seqs(ls []launch) []uint64 {
	out := make([]uint64, len(ls))
	for i, l := range ls {
		out[i] = l.seq
	}
	return out
}

func TestSchedulerKeepsEachRecipientsOrder(t *testing.T) {
	s, _ := newTestScheduler(30)
	for _, seq := range []uint64{3, 1, 5, 2, 4} { // redeliveries arrive out of order
		s.arrive(mkJob(seq, "100"), t0)
	}
	j, _ := s.next(t0)
	if j == nil || j.seq != 1 {
		t.Fatalf("first send %v, want seq 1", j)
	}
	if j2, _ := s.next(t0); j2 != nil {
		t.Fatalf("a second message of the recipient (seq %d) launched while seq 1 is in flight", j2.seq)
	}
	s.finish(j, t0.Add(50*time.Millisecond), true, moveOn, 0)
	got := run(s, t0.Add(50*time.Millisecond), t0.Add(time.Minute), 50*time.Millisecond)
	if want := []uint64{2, 3, 4, 5}; !slices.Equal(seqs(got), want) {
		t.Fatalf("sent %v after seq 1, want %v", seqs(got), want)
	}
	prev := t0
	for _, l := range got {
		if gap := l.at.Sub(prev); gap < 950*time.Millisecond {
			t.Fatalf("seq %d sent %v after the previous one, want at least 950ms (1 msg/s)", l.seq, gap)
		}
		prev = l.at
	}
}

func TestSchedulerDuplicateDeliveryIsAttached(t *testing.T) {
	s, _ := newTestScheduler(30)
	a, b := mkJob(7, "100"), mkJob(7, "100")
	s.arrive(a, t0)
	if _, dup := s.arrive(b, t0); !dup {
		t.Fatal("a redelivery of a held message was not reported as a duplicate")
	}
	j, _ := s.next(t0)
	if j != a || len(j.dups) != 1 || j.dups[0] != b {
		t.Fatalf("got %v with dups %v, want the first delivery with the second attached", j, j.dups)
	}
}

// A hot recipient with a backlog does not delay the others: they go at the
// channel's rate while the hot one keeps its own 1 msg/s.
func TestSchedulerHotRecipientDoesNotDelayOthers(t *testing.T) {
	s, _ := newTestScheduler(30)
	seq := uint64(0)
	for range 20 {
		seq++
		s.arrive(mkJob(seq, "777"), t0)
	}
	for c := 1; c <= 10; c++ {
		seq++
		s.arrive(mkJob(seq, fmt.Sprint(c)), t0)
	}
	got := run(s, t0, t0.Add(30*time.Second), 40*time.Millisecond)
	var lastCold time.Time
	hot := 0
	for _, l := range got {
		if l.r != "777" {
			lastCold = l.at
		}
	}
	for _, l := range got {
		if l.r == "777" && !l.at.After(lastCold) {
			hot++
		}
	}
	if d := lastCold.Sub(t0); d > 500*time.Millisecond {
		t.Fatalf("the ten other recipients were all served only after %v, want within 500ms (30 msg/s)", d)
	}
	if hot > 1 {
		t.Fatalf("the hot recipient sent %d messages while the others waited, want at most 1 (1 msg/s)", hot)
	}
	if n := len(got); n != 30 {
		t.Fatalf("%d sends, want 30", n)
	}
}

// A busy recipient keeps its 1 msg/s during a backlog of many others: among
// the recipients allowed to send, the oldest head message goes first, so
// the busy one is not pushed behind every newly ready recipient.
func TestSchedulerBusyRecipientKeepsItsRateDuringABacklog(t *testing.T) {
	s, _ := newTestScheduler(30)
	seq := uint64(0)
	for range 10 {
		seq++
		s.arrive(mkJob(seq, "777"), t0)
	}
	for c := 1; c <= 150; c++ {
		seq++
		s.arrive(mkJob(seq, fmt.Sprint(c)), t0)
	}
	got := run(s, t0, t0.Add(time.Minute), 40*time.Millisecond)
	var lastCold time.Time
	for _, l := range got {
		if l.r != "777" {
			lastCold = l.at
		}
	}
	during := 0
	for _, l := range got {
		if l.r == "777" && !l.at.After(lastCold) {
			during++
		}
	}
	backlog := lastCold.Sub(t0)
	if want := int(backlog.Seconds()); during < want {
		t.Fatalf("the busy recipient sent %d messages during the %v backlog, want at least %d (1 msg/s)", during, backlog, want)
	}
}

// The channel-wide rate holds across recipients: 100 recipients, one message
// each, at 30/s. No second holds more than 30 sends (the window), and the
// 100 take as long as the rate says.
func TestSchedulerChannelRate(t *testing.T) {
	s, _ := newTestScheduler(30)
	for c := 1; c <= 100; c++ {
		s.arrive(mkJob(uint64(c), fmt.Sprint(c)), t0)
	}
	got := run(s, t0, t0.Add(time.Minute), 10*time.Millisecond)
	if len(got) != 100 {
		t.Fatalf("%d sends, want 100", len(got))
	}
	at := make([]time.Time, len(got))
	for i, g := range got {
		at[i] = g.at
	}
	checkWindows(t, at, 30)
	if d, want := got[99].at.Sub(t0), 99*time.Second/30; d < want-time.Millisecond || d > want+time.Millisecond {
		t.Fatalf("100 sends took %v, want %v (the rate)", d, want)
	}
}

// A group gets 20 msg/min; a private chat 1 msg/s.
func TestSchedulerRecipientRates(t *testing.T) {
	for _, tc := range []struct {
		r   string
		gap time.Duration
	}{{"100", time.Second}, {"-100", 3 * time.Second}} {
		s, _ := newTestScheduler(30)
		for i := uint64(1); i <= 5; i++ {
			s.arrive(mkJob(i, tc.r), t0)
		}
		got := run(s, t0, t0.Add(time.Minute), 20*time.Millisecond)
		if len(got) != 5 {
			t.Fatalf("recipient %s: %d sends, want 5", tc.r, len(got))
		}
		for i := 1; i < len(got); i++ {
			if gap := got[i].at.Sub(got[i-1].at); gap < tc.gap*95/100 {
				t.Fatalf("recipient %s: sends %v apart, want at least 95%% of %v", tc.r, gap, tc.gap)
			}
		}
	}
}

// A message that must wait in the stream (a retry) takes its recipient's
// later messages with it, in order, and records a hold for other workers;
// a message arriving meanwhile waits behind them; when they come back they
// go in order and the hold is released.
func TestSchedulerParksTheLaneBehindARetry(t *testing.T) {
	s, v := newTestScheduler(30)
	for seq := uint64(1); seq <= 3; seq++ {
		v.apply(first(s.arrive(mkJob(seq, "100"), t0)))
	}
	j, _ := s.next(t0)
	eff := s.finish(j, t0, true, retryLater, 5*time.Second)
	v.apply(eff)
	want := []nak{{delay: 5 * time.Second}, {delay: 5*time.Second + parkGap}, {delay: 5*time.Second + 2*parkGap}}
	if len(eff.naks) != 3 {
		t.Fatalf("%d NAKs, want 3", len(eff.naks))
	}
	for i, n := range eff.naks {
		if n.j.seq != uint64(i+1) || n.delay != want[i].delay {
			t.Fatalf("NAK %d: seq %d after %v, want seq %d after %v", i, n.j.seq, n.delay, i+1, want[i].delay)
		}
	}
	h, ok := v.holds["100"]
	if !ok || h.First != 1 || !h.Until.After(t0.Add(5*time.Second)) {
		t.Fatalf("hold %+v (written %v), want first 1 until after the last deadline", h, ok)
	}
	if j, _ := s.next(t0.Add(time.Second)); j != nil {
		t.Fatalf("seq %d launched while its lane is parked", j.seq)
	}
	// A later message arrives before the parked ones are back: it is parked
	// behind them.
	eff, _ = s.arrive(mkJob(4, "100"), t0.Add(time.Second))
	if len(eff.naks) != 1 || eff.naks[0].j.seq != 4 || eff.naks[0].delay <= 4*time.Second {
		t.Fatalf("seq 4 effects %+v, want parked behind the others", eff.naks)
	}
	v.apply(eff)
	// They come back, in order.
	back := t0.Add(5 * time.Second)
	for seq := uint64(1); seq <= 4; seq++ {
		v.apply(first(s.arrive(mkJob(seq, "100"), back)))
	}
	if _, held := v.holds["100"]; held {
		t.Fatal("the hold was not released when every parked message was back")
	}
	got := run(s, back, back.Add(time.Minute), 10*time.Millisecond)
	if !slices.Equal(seqs(got), []uint64{1, 2, 3, 4}) {
		t.Fatalf("sent %v, want [1 2 3 4]", seqs(got))
	}
}

func first(e effects, _ bool) effects { return e }

// A hold left by another worker makes a new lane wait until the worker has
// checked it: later messages wait in the lane, nothing is sent; the check
// finds the held message still out, so it is parked until the hold's
// deadline and sent first when it comes back.
func TestSchedulerHonoursAnotherWorkersHold(t *testing.T) {
	s, v := newTestScheduler(30)
	v.holds["100"] = hold{First: 10, Until: t0.Add(5 * time.Second)}
	eff, _ := s.arrive(mkJob(12, "100"), t0)
	if len(eff.naks) != 0 || len(eff.holds) != 0 {
		t.Fatalf("seq 12 effects %+v, want it kept in the lane while the hold is checked", eff)
	}
	if j, _ := s.next(t0); j != nil {
		t.Fatalf("sent seq %d before the hold was checked", j.seq)
	}
	checks := s.takeVerifies()
	if len(checks) != 1 || checks[0] != (holdCheck{recipient: "100", first: 10}) {
		t.Fatalf("checks %+v, want the hold of 100 from seq 10", checks)
	}
	eff = s.holdVerified("100", []uint64{10}, 1000, t0.Add(100*time.Millisecond))
	if len(eff.holds) != 0 {
		t.Fatalf("the check rewrote or released a hold that is still right: %+v", eff.holds)
	}
	if j, _ := s.next(t0.Add(time.Second)); j != nil {
		t.Fatalf("sent seq %d before the held seq 10 came back", j.seq)
	}
	eff, _ = s.arrive(mkJob(10, "100"), t0.Add(time.Second))
	if len(eff.naks) != 0 {
		t.Fatalf("the held message itself was parked: %+v", eff.naks)
	}
	got := run(s, t0.Add(time.Second), t0.Add(5*time.Second), 10*time.Millisecond)
	if !slices.Equal(seqs(got), []uint64{10, 12}) {
		t.Fatalf("sent %v, want [10 12]", seqs(got))
	}
}

// A stale hold: its first message came back and was sent long ago, then the
// worker died before the hold was released. The check finds nothing out:
// the hold is released at once and the recipient's messages go, instead of
// waiting for the hold's deadline (and a worker restarted again and again
// no longer pushes the hold further every time: found by the chaos suite).
func TestSchedulerReleasesAStaleHold(t *testing.T) {
	s, v := newTestScheduler(30)
	v.holds["100"] = hold{First: 10, Until: t0.Add(time.Minute)}
	s.arrive(mkJob(12, "100"), t0)
	s.arrive(mkJob(13, "100"), t0)
	if n := len(s.takeVerifies()); n != 1 {
		t.Fatalf("%d checks, want 1", n)
	}
	eff := s.holdVerified("100", nil, 1000, t0.Add(50*time.Millisecond))
	if len(eff.holds) != 1 || !eff.holds[0].clear {
		t.Fatalf("hold changes %+v, want the stale hold cleared", eff.holds)
	}
	v.apply(eff)
	got := run(s, t0.Add(50*time.Millisecond), t0.Add(3*time.Second), 10*time.Millisecond)
	if !slices.Equal(seqs(got), []uint64{12, 13}) {
		t.Fatalf("sent %v, want [12 13] within seconds", seqs(got))
	}
}

// The check finds some of the held messages settled and one still out: the
// hold names that one from now on, with the same deadline.
func TestSchedulerMovesAHoldToWhatIsStillOut(t *testing.T) {
	s, v := newTestScheduler(30)
	until := t0.Add(time.Minute)
	v.holds["100"] = hold{First: 10, Until: until}
	s.arrive(mkJob(15, "100"), t0)
	s.takeVerifies()
	eff := s.holdVerified("100", []uint64{11}, 1000, t0)
	if len(eff.holds) != 1 || eff.holds[0].clear || eff.holds[0].h.First != 11 || !eff.holds[0].h.Until.Equal(until) {
		t.Fatalf("hold changes %+v, want first 11 until %v", eff.holds, until)
	}
	if j, _ := s.next(t0.Add(time.Second)); j != nil {
		t.Fatalf("sent seq %d before seq 11 came back", j.seq)
	}
}

// Among recipients that may send, transactional messages go before bulk
// ones, even when the bulk one is older.
func TestSchedulerTransactionalBeforeBulk(t *testing.T) {
	s, _ := newTestScheduler(30)
	for i := uint64(1); i <= 5; i++ {
		s.arrive(bulkJob(i, fmt.Sprint(100+i)), t0)
	}
	for i := uint64(6); i <= 8; i++ {
		s.arrive(mkJob(i, fmt.Sprint(100+i)), t0)
	}
	got := run(s, t0, t0.Add(time.Minute), 10*time.Millisecond)
	if want := []uint64{6, 7, 8, 1, 2, 3, 4, 5}; !slices.Equal(seqs(got), want) {
		t.Fatalf("sent %v, want the transactional ones first: %v", seqs(got), want)
	}
}

// A message to a dead recipient costs no request, so it takes no send
// token: it does not slow anyone down.
func TestSchedulerDeadRecipientTakesNoToken(t *testing.T) {
	s, v := newTestScheduler(1)
	v.deadSet["200"] = true
	for i := uint64(1); i <= 5; i++ {
		s.arrive(mkJob(i, "200"), t0)
	}
	s.arrive(mkJob(6, "300"), t0)
	got := run(s, t0, t0.Add(time.Minute), 0)
	if len(got) != 6 {
		t.Fatalf("%d launches, want 6", len(got))
	}
	for _, l := range got {
		if !l.at.Equal(t0) {
			t.Fatalf("seq %d to %s launched at +%v, want at once (dead recipients take no token)", l.seq, l.r, l.at.Sub(t0))
		}
	}
}

// An attempt that made no request gives its tokens back: the message is
// tried again at once when admission allows.
func TestSchedulerGivesTokensBackWhenNothingWasSent(t *testing.T) {
	s, _ := newTestScheduler(1)
	s.arrive(mkJob(1, "100"), t0)
	j, _ := s.next(t0)
	s.finish(j, t0, false, retryHere, 0)
	if j2, wake := s.next(t0); j2 != j {
		t.Fatalf("after an attempt that sent nothing: got %v (wake %v), want the same message at once", j2, wake)
	}
}

// A hot recipient's overflow goes back to the stream, to return when the
// lane has worked through what it holds.
func TestSchedulerLaneCapHandsOverflowBack(t *testing.T) {
	v := &fakeView{holds: map[string]hold{}, deadSet: map[string]bool{}}
	s := newScheduler(schedConfig{rate: 30, laneRate: telegramRates, laneCap: 3, parkGrace: 40 * time.Second}, v)
	var naks []nak
	for i := uint64(1); i <= 5; i++ {
		eff, _ := s.arrive(mkJob(i, "100"), t0)
		naks = append(naks, eff.naks...)
	}
	if len(naks) != 2 || naks[0].j.seq != 4 || naks[1].j.seq != 5 {
		t.Fatalf("NAKs %+v, want seq 4 and 5 handed back", naks)
	}
	if naks[0].delay < 3*time.Second-time.Millisecond {
		t.Fatalf("overflow returns after %v, want about the lane's backlog (3 × 1s)", naks[0].delay)
	}
}

// Handing everything back (shutdown, a lost pin) NAKs each lane's messages
// in order, behind its parked ones.
func TestSchedulerHandBackAll(t *testing.T) {
	s, _ := newTestScheduler(30)
	for i := uint64(1); i <= 3; i++ {
		s.arrive(mkJob(i, "100"), t0)
		s.arrive(mkJob(i+10, "200"), t0)
	}
	eff, n := s.handBackAll(t0)
	if n != 6 || len(eff.naks) != 6 {
		t.Fatalf("handed back %d (%d NAKs), want 6", n, len(eff.naks))
	}
	byLane := map[string][]uint64{}
	for _, k := range eff.naks {
		byLane[k.j.lane] = append(byLane[k.j.lane], k.j.seq)
	}
	if !slices.Equal(byLane["100"], []uint64{1, 2, 3}) || !slices.Equal(byLane["200"], []uint64{11, 12, 13}) {
		t.Fatalf("handed back %v, want each lane in order", byLane)
	}
	if j, _ := s.next(t0); j != nil {
		t.Fatalf("seq %d still scheduled after handing everything back", j.seq)
	}
}

// Parked messages that do not come back within the grace are checked, not
// forgotten: one still out (not settled) keeps the lane waiting, one
// settled (another worker took it and delivered it) no longer does (bug
// 45: forgotten, a message still out let the next one go first).
func TestSchedulerChecksParkedMessagesThatDoNotComeBack(t *testing.T) {
	s, v := newTestScheduler(30)
	s.arrive(mkJob(1, "100"), t0)
	j, _ := s.next(t0)
	v.apply(s.finish(j, t0, true, retryLater, time.Second))
	v.apply(first(s.arrive(mkJob(2, "100"), t0)))
	late := t0.Add(time.Second + 41*time.Second)
	eff, gone := s.housekeep(late)
	v.apply(eff)
	if len(gone) != 1 || gone[0].count != 2 {
		t.Fatalf("overdue %+v, want the lane's two parked messages", gone)
	}
	if got := s.takeVerifies(); len(got) != 1 || got[0] != (holdCheck{recipient: "100", first: 1}) {
		t.Fatalf("checks %+v, want lane 100 from seq 1", got)
	}
	if len(s.lanes["100"].parked) != 2 {
		t.Fatal("the overdue parks were forgotten before the check answered")
	}
	// Seq 1 is still out; seq 2 was settled meanwhile.
	v.apply(s.holdVerified("100", []uint64{1}, 2, late))
	l := s.lanes["100"]
	if len(l.parked) != 1 || l.parked[0].seq != 1 || !l.parked[0].deadline.Equal(late.Add(10*time.Second)) {
		t.Fatalf("parked %+v after the check, want seq 1 until the recheck", l.parked)
	}
	if eff, _ := s.arrive(mkJob(3, "100"), late); len(eff.naks) != 1 || eff.naks[0].j.seq != 3 {
		t.Fatalf("seq 3 handed back %+v, want it parked behind seq 1", eff.naks)
	}
	// A check that began before seq 3 was delivered does not drop its park.
	l.verify = &hold{First: 1, Until: late}
	v.apply(s.holdVerified("100", []uint64{1}, 2, late))
	if len(l.parked) != 2 {
		t.Fatalf("parked %+v, want seq 3's park kept by a check that did not read it", l.parked)
	}
	if _, held := v.holds["100"]; !held {
		t.Fatal("the hold was released while seq 1 is out")
	}

	// Checked again after the next grace: settled now, the lane moves on.
	later := late.Add(10*time.Second + 41*time.Second)
	eff, gone = s.housekeep(later)
	v.apply(eff)
	if len(gone) != 1 || len(s.takeVerifies()) != 1 {
		t.Fatalf("overdue %+v: want seq 1 checked again", gone)
	}
	v.apply(s.holdVerified("100", []uint64{3}, 3, later)) // seq 3 is still out: it is parked
	if h, held := v.holds["100"]; !held || h.First != 3 {
		t.Fatalf("hold %+v after seq 1 was settled, want it moved to seq 3", h)
	}
	v.apply(first(s.arrive(mkJob(3, "100"), later)))
	if _, held := v.holds["100"]; held {
		t.Fatal("the hold was kept after every parked message came back")
	}
	if j, _ := s.next(later); j == nil || j.seq != 3 {
		t.Fatalf("got %v, want seq 3 sent once the lane stopped waiting", j)
	}
}

// A busy recipient whose every send is launched a little after its token
// became due (waiting for the channel-wide slot, a timer firing late) keeps
// its rate: the lateness is not added to every interval. Two sends are
// never closer than 95% of the interval.
func TestLateLaunchesDoNotSlowABusyChat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perSec    float64
		late      time.Duration // launch after the token became due
		roundTrip time.Duration
	}{
		{"private chat, 30 ms late", 1, 30 * time.Millisecond, 40 * time.Millisecond},
		{"private chat, later than the slack", 1, 120 * time.Millisecond, 40 * time.Millisecond},
		{"group, 100 ms late", 20.0 / 60, 100 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval := time.Duration(float64(time.Second) / tc.perSec)
			slack := interval / chatSlackFraction
			l := &lane{limiter: rate.NewLimiter(rate.Limit(tc.perSec), 1)}
			launch := t0
			l.readyAt = t0
			var launches []time.Time
			const sends = 50
			for range sends {
				launches = append(launches, launch)
				l.limiter.ReserveN(l.tokenDue(launch), 1)
				// The answer comes back; the scheduler reschedules the lane
				// as reschedule does, and it is launched late.
				now := launch.Add(tc.roundTrip)
				l.readyAt = now
				if tokens := l.limiter.TokensAt(now); tokens < 1 {
					l.readyAt = now.Add(time.Duration((1 - tokens) / tc.perSec * float64(time.Second)))
				}
				launch = l.readyAt.Add(tc.late)
			}
			for i := 1; i < len(launches); i++ {
				if gap := launches[i].Sub(launches[i-1]); gap < interval-slack {
					t.Fatalf("sends %d and %d are %v apart, want at least %v (95%% of %v)", i-1, i, gap, interval-slack, interval)
				}
			}
			// Lateness up to the slack is absorbed: the chat keeps its rate.
			// Beyond it, each send loses only what exceeds the slack.
			perSend := interval + max(tc.late-slack, 0)
			want := time.Duration(sends-1) * perSend
			if got := launches[sends-1].Sub(launches[0]); got > want+tc.late {
				t.Fatalf("%d sends took %v, want at most %v (%v each)", sends, got, want+tc.late, perSend)
			}
		})
	}
}

// A message in flight when the worker lost the pin is handed back when its
// attempt ends; messages of its recipient received since (the worker was
// pinned again) must not overtake it: they go back behind it, and the lane
// waits for it.
func TestSchedulerHandBackOfAnInFlightMessageKeepsItsLaneBehindIt(t *testing.T) {
	s, v := newTestScheduler(30)
	v.apply(first(s.arrive(mkJob(1, "100"), t0)))
	j, _ := s.next(t0)
	if j == nil || j.seq != 1 {
		t.Fatalf("launched %v, want seq 1", j)
	}
	// Pinned again: the next message of the recipient arrives while 1 is in
	// flight.
	v.apply(first(s.arrive(mkJob(2, "100"), t0.Add(time.Second))))
	eff := s.finish(j, t0.Add(2*time.Second), false, handBack, 0)
	v.apply(eff)
	if len(eff.naks) != 2 || eff.naks[0].j.seq != 1 || eff.naks[1].j.seq != 2 || eff.naks[1].delay <= eff.naks[0].delay {
		t.Fatalf("NAKs %+v, want 1 then 2 behind it", eff.naks)
	}
	if j, _ := s.next(t0.Add(2 * time.Second)); j != nil {
		t.Fatalf("seq %d launched while its lane waits for seq 1", j.seq)
	}
	// 2 comes back first: it waits behind 1.
	back := t0.Add(3 * time.Second)
	if eff, _ := s.arrive(mkJob(2, "100"), back); len(eff.naks) != 1 || eff.naks[0].j.seq != 2 {
		t.Fatalf("seq 2 back before 1: effects %+v, want it parked again", eff.naks)
	} else {
		v.apply(eff)
	}
	v.apply(first(s.arrive(mkJob(1, "100"), back)))
	v.apply(first(s.arrive(mkJob(2, "100"), back.Add(time.Second))))
	got := run(s, back, back.Add(time.Minute), 10*time.Millisecond)
	if !slices.Equal(seqs(got), []uint64{1, 2}) {
		t.Fatalf("sent %v, want [1 2]", seqs(got))
	}
}

// A head message that can be settled without a request (past its
// fallback deadline, expired, to a dead recipient) still waits for what its
// lane waits for: a parked earlier message, or the lane's takeover check.
// Moved on first, it would reach the next channel before the earlier one.
func TestSchedulerDueWaitsForTheLane(t *testing.T) {
	s, v := newTestScheduler(30)
	all := func(*job) bool { return true }
	// An earlier message of the lane is parked.
	v.apply(first(s.arrive(mkJob(1, "100"), t0)))
	j, _ := s.next(t0)
	v.apply(s.finish(j, t0, true, retryLater, 5*time.Second))
	v.apply(first(s.arrive(mkJob(2, "100"), t0)))
	if got := s.due(t0, all); len(got) != 0 {
		t.Fatalf("due took seq %d while seq 1 is parked", got[0].seq)
	}
	// A takeover: an uncleared lane waits for its check.
	s.startTakeover(t0.Add(time.Minute), t0)
	v.apply(first(s.arrive(mkJob(3, "200"), t0)))
	if got := s.due(t0, all); len(got) != 0 {
		t.Fatalf("due took seq %d before its lane's takeover check", got[0].seq)
	}
	v.apply(s.laneCleared("200", nil, t0.Add(time.Minute), t0))
	if got := s.due(t0, all); len(got) != 1 || got[0].seq != 3 {
		t.Fatalf("due took %v once the lane was cleared, want seq 3", got)
	}
}

// A full lane that gets a message earlier than its last (a takeover's
// suspect coming back) takes it, and hands its last back instead: handed
// back itself, the earlier message came back to a lane still full of the
// later ones that waited for it, again and again.
func TestSchedulerFullLaneTakesAnEarlierMessage(t *testing.T) {
	v := &fakeView{holds: map[string]hold{}, deadSet: map[string]bool{}}
	s := newScheduler(schedConfig{rate: 30, laneRate: telegramRates, laneCap: 3, parkGrace: 40 * time.Second}, v)
	s.startTakeover(t0.Add(time.Minute), t0)
	for i := uint64(2); i <= 4; i++ {
		v.apply(first(s.arrive(mkJob(i, "100"), t0)))
	}
	v.apply(s.laneCleared("100", []uint64{1}, t0.Add(5*time.Second), t0))
	if j, _ := s.next(t0); j != nil {
		t.Fatalf("seq %d sent before the suspect came back", j.seq)
	}
	eff, dup := s.arrive(mkJob(1, "100"), t0.Add(time.Second))
	if dup || len(eff.naks) != 1 || eff.naks[0].j.seq != 4 {
		t.Fatalf("the suspect's return handed back %+v (dup %v), want the lane's last, seq 4", eff.naks, dup)
	}
	v.apply(eff)
	var got []uint64
	for at := t0.Add(time.Second); at.Before(t0.Add(5 * time.Second)); at = at.Add(100 * time.Millisecond) {
		if j, _ := s.next(at); j != nil {
			got = append(got, j.seq)
			s.finish(j, at, true, moveOn, 0)
		}
	}
	v.apply(first(s.arrive(mkJob(4, "100"), t0.Add(5*time.Second))))
	if j, _ := s.next(t0.Add(5 * time.Second)); j != nil {
		got = append(got, j.seq)
	}
	if !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("sent %v, want 1 2 3 4", got)
	}
}

// Parks made before the worker lost the pin, or while it had none, are
// stale: the worker pinned meanwhile may have settled them, so a takeover
// does not count them as held here (bug 43). A lane check keeps a stale park
// that is still a suspect, until the check's deadline at least, and drops
// one that is settled.
func TestSchedulerStaleParks(t *testing.T) {
	s, v := newTestScheduler(30)
	for i := uint64(1); i <= 2; i++ {
		v.apply(first(s.arrive(mkJob(i, "100"), t0)))
		v.apply(first(s.arrive(mkJob(i+10, "200"), t0)))
	}
	j, _ := s.next(t0)
	v.apply(s.finish(j, t0, true, retryLater, time.Second)) // lane j parks both its messages
	if c := s.counts(0); c.parked != 2 || c.ownParked != 2 {
		t.Fatalf("counts %+v after a retry, want 2 parked, both own", c)
	}

	eff, _ := s.handBackAll(t0)
	v.apply(eff)
	s.losePin()
	if c := s.counts(0); c.parked != 2 || c.ownParked != 0 {
		t.Fatalf("counts %+v after the pin was lost, want 2 parked, none own", c)
	}
	s.laneFor("300", t0)
	v.apply(s.nakFailed(mkJob(21, "300"), t0.Add(time.Second)))
	if c := s.counts(0); c.ownParked != 0 {
		t.Fatalf("counts %+v: a park without the pin counted as own", c)
	}

	s.regainPin()
	s.startTakeover(t0.Add(time.Minute), t0.Add(time.Second))
	lo := s.lanes[j.lane].parked[0].seq
	v.apply(first(s.arrive(mkJob(lo+5, j.lane), t0.Add(time.Second))))
	// The check finds the lane's first message still out (another worker
	// holds it until the ack wait), its second settled.
	deadline := t0.Add(7 * time.Second)
	v.apply(s.laneCleared(j.lane, []uint64{lo}, deadline, t0.Add(time.Second)))
	// The new message parked behind the lane's first when it arrived.
	l := s.lanes[j.lane]
	if len(l.parked) != 2 || l.parked[0].seq != lo || l.parked[0].stale || !l.parked[0].deadline.Equal(deadline) || l.parked[1].seq != lo+5 {
		t.Fatalf("lane %s parked %+v after its check, want seq %d, own, until the check's deadline, then seq %d", j.lane, l.parked, lo, lo+5)
	}
	if c := s.counts(0); c.ownParked != 1 || c.parked != 3 {
		t.Fatalf("counts %+v after the check, want only the new message's park counted as own: not the suspect (another worker may hold it, or settle it any moment: bug 56), nor lane 300's stale park", c)
	}
	if sp := s.lanes["300"].parked; len(sp) != 1 || !sp[0].stale {
		t.Fatalf("lane 300 parked %+v, want its stale park kept until checked or expired", sp)
	}
	if j, _ := s.next(t0.Add(2 * time.Second)); j != nil {
		t.Fatalf("seq %d sent before the suspect came back", j.seq)
	}

	// A takeover that runs out of time keeps the stale parks: their
	// messages may still be out.
	if _, held := v.holds["300"]; !held {
		t.Fatal("lane 300's park wrote no hold")
	}
	s.endTakeover(t0.Add(3 * time.Second))
	if sp := s.lanes["300"].parked; len(sp) != 1 {
		t.Fatalf("lane 300 parked %+v after the takeover ran out of time, want its stale park kept", sp)
	}

	// A takeover's count that finds every unacknowledged message held here
	// proves the stale park left settled. Kept, it would bounce each later
	// message of its lane back to the stream at once until it expired.
	v.apply(s.dropStaleParks())
	if sp := s.lanes["300"].parked; len(sp) != 0 {
		t.Fatalf("lane 300 parked %+v after the takeover, want its stale park dropped", sp)
	}
	if _, held := v.holds["300"]; held {
		t.Fatal("lane 300's hold kept after its stale park was dropped")
	}
	eff, _ = s.arrive(mkJob(30, "300"), t0.Add(3*time.Second))
	if len(eff.naks) != 0 {
		t.Fatalf("lane 300 handed back %+v, want seq 30 queued", eff.naks)
	}
	if l := s.lanes[j.lane]; len(l.parked) != 2 {
		t.Fatalf("lane %s parked %+v after the takeover, want its own parks kept", j.lane, l.parked)
	}
}

// A lane whose later messages wait behind the suspects of a takeover —
// in the lane, not handed back until the suspects' deadline — checks again, a second after its takeover check and then twice as long
// after each, whether they were settled meanwhile (the worker that held one
// may have recorded and acked it without it ever coming back); a recheck
// changes nothing of a suspect still out, and one settled lets the lane
// send. A lane with nothing waiting behind its suspects is not rechecked.
func TestSchedulerRechecksSuspectsEarly(t *testing.T) {
	s, v := newTestScheduler(30)
	s.startTakeover(t0.Add(time.Minute), t0)
	v.apply(first(s.arrive(mkJob(5, "100"), t0)))
	deadline := t0.Add(10 * time.Second)
	v.apply(s.laneCleared("100", []uint64{3}, deadline, t0))
	v.apply(s.laneCleared("200", []uint64{4}, deadline, t0)) // nothing of 200 waits
	if j, _ := s.next(t0); j != nil {
		t.Fatalf("seq %d sent before its suspect was settled", j.seq)
	}
	// A later message waits behind the suspect in the lane, not back in
	// the stream until the suspect's deadline; one behind this worker's
	// own park goes back behind it.
	if eff, _ := s.arrive(mkJob(6, "100"), t0); len(eff.naks) != 0 {
		t.Fatalf("seq 6 handed back %+v behind a suspect, want it queued", eff.naks)
	}
	s.laneFor("300", t0)
	v.apply(s.nakFailed(mkJob(21, "300"), deadline))
	if eff, _ := s.arrive(mkJob(22, "300"), t0); len(eff.naks) != 1 || eff.naks[0].j.seq != 22 {
		t.Fatalf("seq 22 handed back %+v behind this worker's own park, want it handed back", eff.naks)
	}

	housekeep := func(at time.Duration) []holdCheck {
		t.Helper()
		eff, gone := s.housekeep(t0.Add(at))
		v.apply(eff)
		if len(gone) != 0 {
			t.Fatalf("at %v: overdue %+v, want none", at, gone)
		}
		return s.takeVerifies()
	}
	if got := housekeep(500 * time.Millisecond); len(got) != 0 {
		t.Fatalf("checks %+v half a second after the takeover check, want none", got)
	}
	want := []holdCheck{{recipient: "100", first: 3, recheck: true}}
	if got := housekeep(time.Second); !slices.Equal(got, want) {
		t.Fatalf("checks %+v a second after the takeover check, want %+v", got, want)
	}
	// Seq 3 is still out: it keeps its deadline, and the lane keeps waiting.
	v.apply(s.holdVerified("100", []uint64{3, 5, 6}, 6, t0.Add(time.Second)))
	l := s.lanes["100"]
	if len(l.parked) != 1 || l.parked[0].seq != 3 || !l.parked[0].deadline.Equal(deadline) {
		t.Fatalf("parked %+v after a recheck, want seq 3 until its deadline", l.parked)
	}
	if j, _ := s.next(t0.Add(time.Second)); j != nil {
		t.Fatalf("seq %d sent while its suspect is still out", j.seq)
	}
	if got := housekeep(2 * time.Second); len(got) != 0 {
		t.Fatalf("checks %+v a second after the first recheck, want the next after two", got)
	}
	if got := housekeep(3 * time.Second); !slices.Equal(got, want) {
		t.Fatalf("checks %+v three seconds after the takeover check, want %+v", got, want)
	}
	// Seq 3 was settled by the worker that held it.
	v.apply(s.holdVerified("100", []uint64{5, 6}, 6, t0.Add(3*time.Second)))
	if j, _ := s.next(t0.Add(3 * time.Second)); j == nil || j.seq != 5 {
		t.Fatalf("next %+v once the suspect was settled, want seq 5", j)
	}
	if got := housekeep(7 * time.Second); len(got) != 0 {
		t.Fatalf("checks %+v after the lane's suspects were settled, want none", got)
	}
	if p := s.lanes["200"].parked; len(p) != 1 {
		t.Fatalf("lane 200 parked %+v, want its suspect kept until it comes back or is overdue", p)
	}
}
