package delivery

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// A worker that becomes pinned while the worker it takes the pin from
// still lives (JetStream moved the pin on a consumer leader change) asks it
// before going on, and keeps the 429 pause its answer carries: its last
// question as a standby may predate the 429 (found by the long chaos run
// on the cluster: two requests inside a 3 s pause). It asks once per pin,
// and a former worker that is gone costs nothing.
func TestNewlyPinnedWorkerKeepsTheFormerWorkersPause(t *testing.T) {
	nc, js := natstest.Start(t).Connect(t)
	now := time.Now()
	w := &Worker{js: js, names: jetstream.DefaultNames(), name: "telegram",
		adm: newAdmission("pin", 1000, time.Minute, nil), log: slog.New(slog.DiscardHandler),
		now: func() time.Time { return now }}
	t.Cleanup(w.unpinned)

	// Nobody answers: the first pin of all.
	w.pinnedAs(t.Context(), "pin-1")
	if p := w.adm.pausedUntil(); !p.IsZero() {
		t.Fatalf("paused until %v with no former worker, want no pause", p)
	}
	w.unpinned() // the pin moves away

	// The pin comes back while the worker it was moved to lives, paused.
	until := now.Add(3 * time.Second).UTC()
	var asked atomic.Int32
	former, err := nc.Subscribe(w.pinSubject(), func(m *nats.Msg) {
		asked.Add(1)
		r := &nats.Msg{Data: []byte("pin-2"), Header: nats.Header{}}
		r.Header.Set(pauseUntilHeader, until.Format(time.RFC3339Nano))
		r.Header.Set(pauseReasonHeader, "429")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = former.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w.pinnedAs(t.Context(), "pin-3")
	if p := w.adm.pausedUntil(); !p.Equal(until) {
		t.Fatalf("paused until %v once pinned, want the former worker's pause until %v", p, until)
	}
	w.pinnedAs(t.Context(), "pin-3") // the next message of the same pin
	if n := asked.Load(); n != 1 {
		t.Errorf("the former worker was asked %d times, want once", n)
	}
	if got := w.pinID(); got != "pin-3" {
		t.Errorf("pin id %q, want pin-3", got)
	}
}

// A worker that reads a 429 tells the other workers of its channel at
// once, on a core subject, and they keep the pause: a standby asks the
// pinned worker only every failoverPing, and the shared state can take
// seconds to write in an election (found by the long chaos run on the
// cluster: a worker killed 204 ms after its 429 took the pause with it,
// and the standby that took over sent two requests inside it).
func TestAPauseIsHeardByTheOtherWorkersAtOnce(t *testing.T) {
	nc, js := natstest.Start(t).Connect(t)
	now := time.Now()
	worker := func(id string) *Worker {
		return &Worker{js: js, names: jetstream.DefaultNames(), name: "telegram", id: id,
			adm: newAdmission(id, 1000, time.Minute, nil), log: slog.New(slog.DiscardHandler),
			now: func() time.Time { return now }}
	}
	active, standby := worker("aaaaaaaaaaaaaaaa"), worker("bbbbbbbbbbbbbbbb")
	for _, w := range []*Worker{active, standby} {
		sub, err := w.hearPauses()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := pause{Until: now.Add(3 * time.Second).UTC(), Reason: "429 for recipient 1"}
	active.broadcastPause(p)
	natstest.WaitFor(t, 10*time.Second, func() bool { return standby.adm.pausedUntil().Equal(p.Until) },
		"the standby keeping the active worker's pause")
	if got := standby.adm.currentPause().Reason; got != p.Reason {
		t.Errorf("the standby's pause says %q, want %q", got, p.Reason)
	}
	// A shorter pause from the standby reaches the active worker after its
	// own broadcast did (one subscription delivers in order): it keeps the
	// shorter one only if it ignored its own.
	q := pause{Until: now.Add(time.Second).UTC(), Reason: "429 for recipient 2"}
	standby.broadcastPause(q)
	natstest.WaitFor(t, 10*time.Second, func() bool { return !active.adm.pausedUntil().IsZero() },
		"the active worker hearing the standby's pause")
	if got := active.adm.pausedUntil(); !got.Equal(q.Until) {
		t.Errorf("the active worker is paused until %v, want the standby's %v: it took its own broadcast", got, q.Until)
	}
}

// The pin a worker held before a reconnect is one it learned from a message
// of an earlier connection: a pin first seen after the reconnect (JetStream
// may have given it after another worker held the pin meanwhile) does not
// let the worker cut its settle short, however soon its dispatcher notices
// the reconnect. The same pin seen again after the reconnect keeps the
// count it was first seen at.
func TestPinHeldBeforeIsOnlyAPinLearnedBeforeTheReconnect(t *testing.T) {
	nc, js := natstest.Start(t).Connect(t)
	w := &Worker{js: js, names: jetstream.DefaultNames(), name: "telegram",
		adm: newAdmission("pin", 1000, time.Minute, nil), log: slog.New(slog.DiscardHandler), now: time.Now}
	t.Cleanup(w.unpinned)
	if got := w.pinHeldBefore(1); got != "" {
		t.Fatalf("pinHeldBefore(1) = %q unpinned, want none", got)
	}
	w.pinnedAs(t.Context(), "pin-a")
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return nc.Stats().Reconnects == 1 && nc.IsConnected() }, "the connection back")
	w.pinnedAs(t.Context(), "pin-a") // the same pin, from the new connection
	if got := w.pinHeldBefore(1); got != "pin-a" {
		t.Fatalf("pinHeldBefore(1) = %q, want pin-a, learned before the reconnect", got)
	}
	w.unpinned()
	w.pinnedAs(t.Context(), "pin-c") // a new pin, from the new connection
	if got := w.pinHeldBefore(1); got != "" {
		t.Fatalf("pinHeldBefore(1) = %q, want none: pin-c came after the reconnect", got)
	}
	if got := w.pinHeldBefore(2); got != "pin-c" {
		t.Fatalf("pinHeldBefore(2) = %q, want pin-c, learned before a second reconnect", got)
	}
}
