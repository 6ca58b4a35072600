package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// world builds a consistent Observed by hand: orders, their outbox rows and
// stream messages in commit order, and by default one delivered copy each.
type world struct {
	t   *testing.T
	o   Observed
	now time.Time
	seq uint64
}

func newWorld(t *testing.T) *world {
	return &world{t: t, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		o: Observed{Placements: map[string]system.Placement{}, Worker: defaultWorker()}}
}

// order adds an accepted order to chat, committed (outbox id) in call order.
func (w *world) order(id string, chat int64) string {
	w.seq++
	po := PlannedOrder{Order: shop.Order{ID: id, ChatID: chat}}
	w.o.Plan.Orders = append(w.o.Plan.Orders, po)
	w.o.Placements[id] = system.Placement{Created: 1, CreatedAt: w.at(0)}
	key := shop.NotificationKey(id)
	w.o.Outbox = append(w.o.Outbox, OutboxRow{ID: int64(w.seq), Key: key, Chat: chat, CreatedAt: w.at(0), Published: true})
	w.o.Stream = append(w.o.Stream, StreamMsg{Seq: w.seq, Chat: chat, Key: key})
	return key
}

func (w *world) at(ms int) time.Time { return w.now.Add(time.Duration(ms) * time.Millisecond) }

// deliver records a copy of order id in chat at ms.
func (w *world) deliver(id string, chat int64, ms int, dropped bool) {
	w.o.Messages = append(w.o.Messages, emulator.Message{ChatID: chat, Text: fmt.Sprintf("<b>Order %s accepted</b>\nHello", id),
		Time: w.at(ms), ResponseDropped: dropped})
}

func (w *world) dead(id string, chat int64, reason string, ms int) {
	w.o.Dead = append(w.o.Dead, system.DeadLetter{Seq: uint64(len(w.o.Dead) + 1), Key: shop.NotificationKey(id),
		Subject: fmt.Sprintf("dead.notify.telegram.%s.%d", reason, chat), Reason: reason, DeadAt: w.at(ms)})
}

func (w *world) kill(process string, ms int) {
	w.o.Kills = append(w.o.Kills, KillRecord{Process: process, At: w.at(ms)})
}

// failed returns the texts of the failed checks with their details.
func failed(r Result) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Text+": "+strings.Join(c.Detail, " | "))
		}
	}
	return out
}

func TestEvaluateCleanRunPasses(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.order("G1", migratedGroup)
	w.order("D1", 3_000_003)
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("A2", 2_000_001, 1200, false)
	w.deliver("G1", supergroup, 300, false)
	w.dead("D1", 3_000_003, "deactivated", 50)
	r := Evaluate(w.o)
	if f := failed(r); len(f) > 0 || !r.Passed() {
		t.Fatalf("clean run failed: %v", f)
	}
	if r.Figures.Delivered != 3 || r.Figures.DeliveredOnce != 3 || r.Figures.DeadByReason["deactivated"] != 1 {
		t.Errorf("figures %+v", r.Figures)
	}
	if got := r.Figures.Latency; len(got) != 3 {
		t.Errorf("latencies %v, want 3", got)
	}
}

func TestEvaluateDuplicates(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(w *world)
		cause  string
		failed bool
	}{
		{"answer dropped", func(w *world) {
			w.deliver("A1", 2_000_001, 100, true)
			w.deliver("A1", 2_000_001, 900, false)
		}, CauseAnswerDropped, false},
		{"worker killed after the copy", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.kill("worker-1", 105)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"request on the wire as the worker died", func(w *world) {
			w.kill("worker-2", 80)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"request slowed by an outage as the worker died", func(w *world) {
			w.o.Outages = []OutageRecord{{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 0.5, Delay: 2 * time.Second},
				Start: w.at(-3000), End: w.at(500)}}
			w.kill("worker-2", -1500)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"kill long before the copy explains nothing", func(w *world) {
			w.kill("worker-2", -1500)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, "", true},
		{"publisher kill explains nothing", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.kill(namePublisher, 200)
			w.deliver("A1", 2_000_001, 6000, false)
		}, "", true},
		{"kill after the second copy explains nothing", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
			w.kill("worker-1", 7000)
		}, "", true},
		{"no cause", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 900, false)
		}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.order("A1", 2_000_001)
			tt.setup(w)
			r := Evaluate(w.o)
			if got := len(failed(r)) > 0; got != tt.failed {
				t.Fatalf("failed = %v (%v), want %v", got, failed(r), tt.failed)
			}
			if tt.cause != "" && r.Figures.Duplicates[tt.cause] != 1 {
				t.Errorf("duplicates by cause %v, want one %q", r.Figures.Duplicates, tt.cause)
			}
		})
	}
}

func TestEvaluateOrder(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.order("B1", 2_000_002)
	w.deliver("A2", 2_000_001, 100, false) // overtook A1
	w.deliver("A1", 2_000_001, 1100, false)
	w.deliver("B1", 2_000_002, 50, false)
	r := Evaluate(w.o)
	if r.Figures.OrderViolations != 1 {
		t.Fatalf("order violations %d, want 1: %v", r.Figures.OrderViolations, failed(r))
	}
	if f := failed(r); len(f) != 1 || !strings.Contains(f[0], "commit order") {
		t.Errorf("failed checks %v, want only the order check", f)
	}
}

func TestEvaluateBlockedDuringTheRun(t *testing.T) {
	const chat = 2_000_005
	setup := func() *world {
		w := newWorld(t)
		w.o.Blocks = map[int64]time.Time{chat: w.at(500)}
		w.order("A1", chat)
		w.order("A2", chat)
		w.order("A3", chat)
		return w
	}
	t.Run("delivered before, dead after", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "blocked", 600)
		w.dead("A3", chat, "blocked", 700)
		if f := failed(Evaluate(w.o)); len(f) > 0 {
			t.Fatal(f)
		}
	})
	t.Run("delivered after a dead letter", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "blocked", 600)
		w.deliver("A3", chat, 700, false)
		if r := Evaluate(w.o); r.Figures.OrderViolations != 1 {
			t.Fatalf("order violations %d, want 1: %v", r.Figures.OrderViolations, failed(r))
		}
	})
	t.Run("wrong reason", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "kicked", 600)
		w.dead("A3", chat, "blocked", 700)
		if f := failed(Evaluate(w.o)); len(f) != 1 || !strings.Contains(f[0], "kicked") {
			t.Fatalf("failed %v, want the wrong reason named", f)
		}
	})
	t.Run("delivered then dead after a dropped answer", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, true)
		w.dead("A1", chat, "blocked", 600)
		w.dead("A2", chat, "blocked", 700)
		w.dead("A3", chat, "blocked", 800)
		r := Evaluate(w.o)
		if f := failed(r); len(f) > 0 {
			t.Fatal(f)
		}
		if r.Figures.DeliveredAndDead[CauseAnswerDropped] != 1 {
			t.Errorf("delivered and dead %v", r.Figures.DeliveredAndDead)
		}
	})
}

func TestEvaluateLostAndStray(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("ZZ", 2_000_009, 100, false) // no such order
	w.o.Stream = append(w.o.Stream, StreamMsg{Seq: 99, Chat: 2_000_001, Key: shop.NotificationKey("A1")})
	w.o.Outbox[1].Published = false
	w.o.AckPending = 3
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	for _, want := range []string{
		"A2:accepted (chat 2000001): neither delivered nor dead-lettered",
		"1 unexpected",
		"stored 2 times in NOTIFY",
		"1 outbox rows still pending",
		"3 unacknowledged",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

func TestEvaluateStreamOrder(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.o.Stream[0].Seq, w.o.Stream[1].Seq = 2, 1 // the publisher swapped them
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("A2", 2_000_001, 1100, false)
	f := failed(Evaluate(w.o))
	if len(f) != 1 || !strings.Contains(f[0], "1 reordered") {
		t.Fatalf("failed %v, want the stream order check", f)
	}
}

func TestEvaluatePausesAndBreaker(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.o.Emulator.SentInAnyPause = 1
	ws := w.o.Worker
	lives := []time.Duration{5 * time.Second}
	bound := breakerBound(ws, lives)
	if want := int64(ws.MaxInFlight + ws.BreakerFailures - 1 + 1 + 2); bound != want {
		t.Fatalf("bound %d, want %d", bound, want)
	}
	w.o.Outages = []OutageRecord{
		{Outage: emulator.Outage{Mode: emulator.Fault5xx, Probability: 1}, Failing: bound + 1, Lives: lives},
		{Outage: emulator.Outage{Mode: emulator.Fault5xx, Probability: 0.5}, Failing: 1000, Lives: lives}, // no bound
		{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 1}, Failing: 1000, Lives: lives},  // no bound
	}
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	if !strings.Contains(f, "sent_in_any_pause 1") {
		t.Errorf("a request inside a pause passed:\n%s", f)
	}
	if !strings.Contains(f, fmt.Sprintf("%d failed calls, the breaker allows %d", bound+1, bound)) || strings.Contains(f, "1000 failed") {
		t.Errorf("breaker check:\n%s", f)
	}
}

func TestEvaluatePlacementsAndProcesses(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.o.Plan.Orders = append(w.o.Plan.Orders, PlannedOrder{Order: shop.Order{ID: "A2", ChatID: 2_000_001}})
	w.o.Placements["A2"] = system.Placement{Errors: []string{"HTTP 500"}}
	w.o.Failures = []string{"publisher (pid 7) ended unexpectedly: exit status 1"}
	w.o.Leftovers = []string{"shop (pid 9)"}
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	for _, want := range []string{"A2: HTTP 500", "ended unexpectedly", "still running: shop (pid 9)"} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// A run's record, saved as JSON and read back, gives the same verdict and
// figures: -recheck can evaluate a run again without running it.
func TestRecordRoundTrip(t *testing.T) {
	w := newWorld(t)
	w.o.Blocks = map[int64]time.Time{2_000_002: w.at(50)}
	w.order("A1", 2_000_001)
	w.order("B1", 2_000_002)
	w.deliver("A1", 2_000_001, 100, true)
	w.deliver("A1", 2_000_001, 900, false)
	w.dead("B1", 2_000_002, "blocked", 60)
	w.kill("worker-1", 2000)
	w.o.Outages = []OutageRecord{{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 1, Delay: time.Second, Duration: 3 * time.Second},
		Start: w.at(0), End: w.at(3000), Lives: []time.Duration{3 * time.Second}}}
	dir := t.TempDir()
	rec := Record{Config: ShortConfig(), Observed: w.o, Elapsed: time.Minute}
	if err := rec.save(dir + "/" + recordFile); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	got, err := Recheck(dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := Evaluate(w.o)
	if got.Passed() != want.Passed() || fmt.Sprint(got.Figures) != fmt.Sprint(want.Figures) {
		t.Fatalf("recheck differs:\n got %+v\nwant %+v", got.Figures, want.Figures)
	}
	if !strings.Contains(out.String(), "RESULT: PASS") {
		t.Errorf("the recheck report:\n%s", out.String())
	}
}
