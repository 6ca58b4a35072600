package delivery

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// No request is admitted after a 429 was read, however the goroutines are
// scheduled: admit and pauseFor take one lock. Requests admitted before are
// the ones counted as crossing. The test hammers admit from several
// goroutines while one reads a "429"; run it with -race and on a busy
// machine: it has no timing assumption.
func TestAdmissionNothingStartsAfterA429WasRead(t *testing.T) {
	for round := range 50 {
		a := newAdmission("test", 1000, time.Minute, nil)
		now := time.Now()
		var paused atomic.Bool
		var violations, admittedBefore atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				for range 200 {
					wasPaused := paused.Load()
					tk, err := a.admit(now, "")
					if err == nil {
						if wasPaused {
							violations.Add(1)
						} else {
							admittedBefore.Add(1)
						}
						tk.settle(Outcome{Kind: Delivered})
					}
				}
			})
		}
		var crossing int
		wg.Go(func() {
			<-start
			tk, err := a.admit(now, "")
			if err != nil {
				t.Errorf("round %d: the 429's own request was not admitted: %v", round, err)
				return
			}
			crossing = a.pauseFor(pause{Until: now.Add(time.Hour), Reason: "429"}, tk).count
			paused.Store(true)
			tk.settle(Outcome{Kind: RetryAfter})
		})
		close(start)
		wg.Wait()
		if v := violations.Load(); v != 0 {
			t.Fatalf("round %d: %d requests admitted after the 429 was read, want 0", round, v)
		}
		if crossing > 8 {
			t.Fatalf("round %d: %d requests crossing the 429, want at most the 8 other senders", round, crossing)
		}
		var na *NotAdmittedError
		if _, err := a.admit(now, ""); !errors.As(err, &na) || !na.Until.Equal(now.Add(time.Hour)) || na.Reason != "paused" {
			t.Fatalf("round %d: admit during the pause = %v, want a NotAdmittedError until the pause's end", round, err)
		}
	}
}

// pauseFor counts the other requests admitted and not answered yet, and
// names the recipients of every request in flight while the 429's own was.
func TestAdmissionCountsCrossingRequests(t *testing.T) {
	a := newAdmission("test", 1000, time.Minute, nil)
	now := time.Now()
	var tickets []*ticket
	for i := range 4 {
		tk, err := a.admit(now, fmt.Sprintf("chat%d", i))
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	// Answered before the 429 was read: not counted, but named, since the
	// provider may have decided it after it wrote the 429.
	tickets[3].settle(Outcome{Kind: Delivered})
	if got := a.pauseFor(pause{Until: now.Add(time.Second)}, tickets[0]); got.count != 2 || !sameRecipients(got.recipients, "chat1", "chat2", "chat3") {
		t.Fatalf("crossing = %d %q, want 2 and chat1,chat2,chat3 (four admitted, one answered, one is the 429 itself)", got.count, got.recipients)
	}
	if ok, until, why := a.gate(now, 0); ok || !until.Equal(now.Add(time.Second)) || why != "paused" {
		t.Fatalf("gate during the pause = %v, %v, %q", ok, until, why)
	}
	if ok, _, _ := a.gate(now.Add(time.Second), 0); !ok {
		t.Fatal("gate refused after the pause ended")
	}
	later, err := a.admit(now.Add(time.Second), "later")
	if err != nil {
		t.Fatalf("admit after the pause ended: %v", err)
	}

	// With the answer's first byte reported, the count is taken then: a
	// request answered and settled between the first byte and the pause
	// may still have reached the provider after the 429 was decided.
	later.answering()
	tickets[1].settle(Outcome{Kind: Delivered})
	tickets[2].settle(Outcome{Kind: Delivered})
	// Admitted after the first byte (its wait for the answers begun
	// before it timed out) and answered before the 429 was classified:
	// it may have reached the provider inside the pause too.
	after, err := a.admit(now.Add(time.Second), "after")
	if err != nil {
		t.Fatalf("admit while the 429 is being read: %v", err)
	}
	after.settle(Outcome{Kind: Delivered})
	if got := a.pauseFor(pause{Until: now.Add(3 * time.Second)}, later); got.count != 4 || !sameRecipients(got.recipients, "chat0", "chat1", "chat2", "after") {
		t.Fatalf("crossing = %d %q, want 4 and chat0,chat1,chat2,after (the three others open when the answer began, one admitted after; not chat3, answered before the 429's request was admitted)", got.count, got.recipients)
	}
}

// sameRecipients reports whether got holds want's recipients, in any order.
func sameRecipients(got []string, want ...string) bool {
	return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}

// The admission remembers the latest settledMemory settled requests, in
// the order they were settled, across the ring's wrap.
func TestSettledTicketsSince(t *testing.T) {
	var s settledTickets
	if got := s.since(0, nil); len(got) != 0 {
		t.Fatalf("since(0) of none settled = %q", got)
	}
	for i := 1; i <= 3*settledMemory+5; i++ {
		s.add(strconv.Itoa(i))
		for _, n := range []uint64{0, s.n - 1, s.n, s.n - min(s.n, 10)} {
			got := s.since(n, nil)
			from := max(n+1, s.n+1-min(s.n, settledMemory))
			var want []string
			for k := from; k <= s.n; k++ {
				want = append(want, strconv.FormatUint(k, 10))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("after %d settled, since(%d) = %q, want %q", s.n, n, got, want)
			}
		}
	}
}

// Halt and settle each stop admission until they end.
func TestAdmissionRules(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		set   func(a *admission)
		clear func(a *admission)
		want  string
	}{
		{"halt", func(a *admission) { a.setHalted(true) }, func(a *admission) { a.setHalted(false) }, "halted"},
		{"settle", func(a *admission) { a.settleFor(now.Add(time.Second), settleCause{}) }, nil, "settling after a NATS reconnect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission("test", 5, time.Minute, nil)
			tc.set(a)
			if ok, _, why := a.gate(now, 0); ok || why != tc.want {
				t.Fatalf("gate = %v %q, want refused with %q", ok, why, tc.want)
			}
			if _, err := a.admit(now, ""); err == nil {
				t.Fatal("admitted while blocked")
			}
			if tc.clear != nil {
				tc.clear(a)
			} else {
				now = now.Add(time.Second)
			}
			if _, err := a.admit(now, ""); err != nil {
				t.Fatalf("admit after the rule ended: %v", err)
			}
		})
	}
}

// A run of transient failures opens the breaker: no admission until the
// open period has passed, then one probe at a time.
// A settle after a reconnect ends early only for the reconnect it follows
// and only if the worker held a pin then: a later reconnect's settle is not
// ended by the confirmation of an earlier one, and a worker that was not
// pinned has nothing to confirm.
func TestAdmissionSettleEndsEarlyOnlyForItsReconnect(t *testing.T) {
	now := time.Now()
	a := newAdmission("test", 5, time.Minute, nil)
	first := settleCause{reconnects: 1, pin: "P"}
	a.settleFor(now.Add(ReconnectSettle), first)
	if c, ok := a.settlingFor(now); !ok || c != first {
		t.Fatalf("settlingFor = %+v, %v; want %+v, true", c, ok, first)
	}
	if a.keptPin(now, settleCause{reconnects: 0, pin: "P"}) {
		t.Fatal("a confirmation of an earlier reconnect ended the settle")
	}
	second := settleCause{reconnects: 2, pin: "P"}
	a.settleFor(now.Add(ReconnectSettle), second)
	if a.keptPin(now, first) {
		t.Fatal("the first reconnect's confirmation ended the second one's settle")
	}
	if ok, _, why := a.gate(now, 0); ok {
		t.Fatal("admitted while settling")
	} else if why != "settling after a NATS reconnect" {
		t.Fatalf("blocked for %q, want the settle", why)
	}
	if !a.keptPin(now, second) {
		t.Fatal("the second reconnect's confirmation did not end its settle")
	}
	if ok, _, why := a.gate(now, 0); !ok {
		t.Fatalf("still blocked (%s) after the settle ended", why)
	}
	if _, ok := a.settlingFor(now); ok {
		t.Fatal("settlingFor reports a settle that ended")
	}
	if a.keptPin(now, second) {
		t.Fatal("a settle that had ended was ended again")
	}

	a.settleFor(now.Add(ReconnectSettle), settleCause{reconnects: 3})
	if _, ok := a.settlingFor(now); ok {
		t.Fatal("a settle begun without a pin has a pin to confirm")
	}
}

// The settle after a reconnect runs ReconnectSettle from when the
// connection came back, as jetstream.Reconnects recorded it: what is left
// of it when the worker notices late, nothing when it notices after it. A
// reconnect not recorded (the handler has not run yet, or no Reconnects)
// settles from when the worker noticed.
func TestSettleAfterReconnectRunsFromTheReconnect(t *testing.T) {
	now := time.Now()
	clock := now
	back := &jetstream.Reconnects{Now: func() time.Time { return clock }}
	for _, tc := range []struct {
		name     string
		times    *jetstream.Reconnects
		recorded uint64        // the last reconnect recorded, 0 for none
		ago      time.Duration // how long before now it was recorded
		rc       uint64        // the reconnect the worker noticed
		want     time.Time     // the settle's end, zero for none
	}{
		{"noticed at once", back, 1, 0, 1, now.Add(ReconnectSettle)},
		{"noticed a second late", back, 2, time.Second, 2, now.Add(ReconnectSettle - time.Second)},
		{"noticed after the settle", back, 3, ReconnectSettle + time.Second, 3, time.Time{}},
		{"a later reconnect not recorded yet", back, 4, time.Minute, 5, now.Add(ReconnectSettle)},
		{"no record of reconnects", nil, 0, 0, 1, now.Add(ReconnectSettle)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.recorded > 0 {
				clock = now.Add(-tc.ago)
				back.Record(tc.recorded)
			}
			w := &Worker{adm: newAdmission("test", 5, time.Minute, nil), log: slog.New(slog.DiscardHandler), reconnectTimes: tc.times}
			w.settleAfterReconnect(tc.rc, now)
			if got := w.adm.settleUntil; !got.Equal(tc.want) {
				t.Errorf("settle until %v, want %v", got.Sub(now), tc.want.Sub(now))
			}
			if ok, _, why := w.adm.gate(now, 0); ok != tc.want.IsZero() {
				t.Errorf("admitted %v (%s), want %v", ok, why, tc.want.IsZero())
			}
		})
	}
}

func TestAdmissionBreaker(t *testing.T) {
	var transitions []gobreaker.State
	var mu sync.Mutex
	a := newAdmission("test", 3, 50*time.Millisecond, func(_, to gobreaker.State) {
		mu.Lock()
		transitions = append(transitions, to)
		mu.Unlock()
	})
	now := time.Now()
	for range 3 {
		tk, err := a.admit(now, "")
		if err != nil {
			t.Fatal(err)
		}
		tk.settle(Outcome{Kind: Transient})
	}
	if ok, retryAt, why := a.gate(now, 0); ok || why != "breaker open" || retryAt.IsZero() {
		t.Fatalf("gate after 3 failures = %v %v %q, want the breaker open with a time to look again", ok, retryAt, why)
	}
	if _, err := a.admit(now, ""); err == nil {
		t.Fatal("admitted with the breaker open")
	}
	// Canceled and not-sent attempts say nothing about the provider.
	deadline := time.Now().Add(10 * time.Second)
	for a.breakerState() != gobreaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never became half-open")
		}
		time.Sleep(5 * time.Millisecond) // the breaker's own timer runs on the real clock
	}
	if ok, _, why := a.gate(now, 1); ok || why != "breaker probing" {
		t.Fatalf("gate while a probe is in flight = %v %q, want one probe at a time", ok, why)
	}
	probe, err := a.admit(now, "")
	if err != nil {
		t.Fatalf("the probe was not admitted: %v", err)
	}
	if _, err := a.admit(now, ""); err == nil {
		t.Fatal("a second request admitted beside the half-open probe")
	}
	probe.settle(Outcome{Kind: RecipientDead}) // a healthy answer closes it
	if s := a.breakerState(); s != gobreaker.StateClosed {
		t.Fatalf("breaker %v after a healthy probe, want closed", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(transitions) != 3 {
		t.Fatalf("transitions %v, want open, half-open, closed", transitions)
	}
}

// Nothing is admitted while the connection to NATS is down: the delivery
// record of a request sent then could not be written, and a standby taking
// the message over would send it again (found by the chaos suite: a worker
// went on sending for a second after a nats-server restart, and the standby
// sent the same messages). The dispatcher looks again soon.
func TestAdmissionNothingWhileDisconnected(t *testing.T) {
	a := newAdmission("test", 1000, time.Minute, nil)
	var up atomic.Bool
	a.connected = up.Load
	now := time.Now()
	ok, retryAt, reason := a.gate(now, 0)
	if ok || reason != "not connected to NATS" || !retryAt.After(now) {
		t.Fatalf("gate while disconnected = %v, %v, %q; want refused with a time to look again", ok, retryAt, reason)
	}
	var na *NotAdmittedError
	if _, err := a.admit(now, ""); !errors.As(err, &na) || na.Reason != "not connected to NATS" {
		t.Fatalf("admit while disconnected = %v, want a NotAdmittedError saying why", err)
	}
	up.Store(true)
	if ok, _, reason := a.gate(now, 0); !ok {
		t.Fatalf("gate when connected refused: %s", reason)
	}
	tk, err := a.admit(now, "")
	if err != nil {
		t.Fatalf("admit when connected: %v", err)
	}
	tk.settle(Outcome{Kind: Delivered})
}

// Once the worker begins to stop, nothing is admitted again, whatever else
// the admission allows.
func TestAdmissionRefusesEverythingOnceStopping(t *testing.T) {
	now := time.Now()
	a := newAdmission("test", 5, time.Minute, nil)
	if _, err := a.admit(now, "r"); err != nil {
		t.Fatalf("admit before the stop: %v", err)
	}
	a.stop()
	if ok, _, why := a.gate(now, 0); ok || why != "stopping" {
		t.Fatalf("gate = %v %q, want refused with %q", ok, why, "stopping")
	}
	var na *NotAdmittedError
	if _, err := a.admit(now.Add(time.Hour), "r"); !errors.As(err, &na) || na.Reason != "stopping" || !na.Until.IsZero() {
		t.Fatalf("admit while stopping: %v, want refused with reason stopping and no end", err)
	}
}
