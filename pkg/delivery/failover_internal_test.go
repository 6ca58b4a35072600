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
