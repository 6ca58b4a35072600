package delivery

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// While every reading of the consumer is doubted (here: it counts fewer
// unacknowledged messages than the worker holds), the lanes are checked
// anyway, in a window from the reading's ack floor up to the stream's last
// sequence: the first doubted reading asks for that sequence, the next
// brings it. A reading with nothing delivered bounds nothing. The takeover
// still ends only on a reading that could be right, and that reading does
// not narrow the window the lanes were checked in. Found by the long
// cluster chaos run on 1587072, where a worker sent nothing for 13 s.
func TestDoubtedReadingsStillCheckTheLanes(t *testing.T) {
	now := t0
	s, v := newTestScheduler(30)
	w := dispatcherUnderTest(s, prometheus.NewRegistry(), &now)
	w.cfg.AckWait = 4 * time.Second
	s.startTakeover(now.Add(time.Minute), now)
	ended := false
	w.stopCheck = func() { ended = true }
	// The worker holds 12 and 13 of recipient 100; no check may start its
	// goroutine here, so the checks' slots are all taken: a lane to check
	// waits in the queue.
	v.apply(first(s.arrive(mkJob(12, "100"), now)))
	v.apply(first(s.arrive(mkJob(13, "100"), now)))
	w.clearsRunning = maxClearing

	for _, c := range []ackCount{
		{pending: 0, floor: 0, delivered: 0, last: 40}, // a consumer state not loaded yet
		{pending: 1, floor: 10, delivered: 20},         // fewer than the worker holds
	} {
		w.onTakeoverCheck(c)
		if w.clearWindow != nil || len(w.clearQueue) != 0 {
			t.Fatalf("after the reading %+v: window %+v, lanes to check %v; want none yet", c, w.clearWindow, w.clearQueue)
		}
	}
	if !w.wantStreamLast.Load() {
		t.Fatal("a doubted reading did not ask for the stream's last sequence")
	}
	if j, _ := s.next(now); j != nil {
		t.Fatalf("lane %s sent seq %d before its check", j.lane, j.seq)
	}

	w.onTakeoverCheck(ackCount{pending: 1, floor: 10, delivered: 20, last: 30})
	if w.clearWindow == nil || w.clearWindow.floor != 10 || w.clearWindow.delivered != 30 {
		t.Fatalf("window %+v after a doubted reading with the stream's last sequence 30, want (10, 30]", w.clearWindow)
	}
	if !slices.Equal(w.clearQueue, []string{"100"}) {
		t.Fatalf("lanes to check %v, want [100]", w.clearQueue)
	}
	if w.wantStreamLast.Load() || w.takeoverBounds != nil || ended {
		t.Fatalf("after the window: asking for the stream's last %v, bounds %+v, takeover ended %v; want false, none, false",
			w.wantStreamLast.Load(), w.takeoverBounds, ended)
	}
	// The check finds nothing held elsewhere: the lane sends, while the
	// takeover goes on.
	w.clearQueue, w.clearsRunning = nil, 1
	w.onCleared(cleared{recipient: "100"})
	if j, _ := s.next(now); j == nil || j.seq != 12 {
		t.Fatalf("lane 100 did not send once checked: %v", j)
	}

	// A reading that could be right fixes the bounds later readings are
	// judged by; the lanes keep the wider window.
	w.onTakeoverCheck(ackCount{pending: 5, floor: 10, delivered: 25})
	if w.takeoverBounds == nil || w.takeoverBounds.delivered != 25 {
		t.Fatalf("bounds %+v after a reading that could be right, want its (10, 25]", w.takeoverBounds)
	}
	if w.clearWindow.delivered != 30 {
		t.Fatalf("window %+v, want (10, 30] kept", w.clearWindow)
	}
	if ended {
		t.Fatal("the takeover ended with 3 unacknowledged messages not the worker's")
	}
}

// A suspect the consumer had not delivered at a reading (a lane checked
// while readings were doubted reads up to the stream's last sequence) was
// not one of its unacknowledged messages: the verification does not count
// it, and the takeover goes on while the message it cannot account for is
// still out.
func TestTakeoverDoesNotCountASuspectNotYetDelivered(t *testing.T) {
	w, ended := suspectCountUnderTest(t, map[string]bool{"k5": false, "k11": false})
	w.clearWindow = &ackCount{floor: 4, delivered: 12}
	now := w.now()
	w.apply(w.sched.laneCleared("300", []uint64{11}, now.Add(4*time.Second), now))
	w.suspectKeys[11] = "k11"
	// The consumer counts 9 (held here), 5 (a suspect) and one more: 11,
	// a suspect too but not delivered at the reading, cannot be it.
	if !verify(t, w, ackCount{pending: 3, floor: 4, delivered: 9}) {
		t.Fatal("no verification of the suspects")
	}
	if ended() {
		t.Fatal("the takeover ended counting a suspect the consumer had not delivered")
	}
	// The same reading with 11 delivered accounts for every message.
	w.verifyAfter = time.Time{}
	verify(t, w, ackCount{pending: 3, floor: 4, delivered: 11})
	if !ended() {
		t.Fatal("the takeover goes on though its unaccounted messages are the suspects it waits for")
	}
}

// streamLast reads the last sequence of the consumer's stream.
func TestStreamLast(t *testing.T) {
	_, js, res := provisionedServer(t)
	ctx := context.Background()
	names := jetstream.DefaultNames()
	w := &Worker{js: js, res: res, names: names, log: slog.New(slog.DiscardHandler)}
	if got := w.streamLast(ctx); got != 0 {
		t.Fatalf("streamLast of an empty stream = %d, want 0", got)
	}
	for _, r := range []string{"100", "200", "100"} {
		if _, err := js.Publish(ctx, names.Subject("telegram", r), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.streamLast(ctx); got != 3 {
		t.Fatalf("streamLast = %d after three messages, want 3", got)
	}
}
