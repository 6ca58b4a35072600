package delivery

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A pull request lost in an election is issued again every two heartbeats
// (a second each): the first "no heartbeat" or "no responders" of a streak
// is a warning, the others for quietWarnEvery are debug lines; every other
// consume error is a warning.
func TestConsumeErrorsOfAnElectionWarnOnce(t *testing.T) {
	now := time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	w := &Worker{now: func() time.Time { return now }}
	var last atomic.Int64
	lost := fmt.Errorf("consume: %w", natsjs.ErrNoHeartbeat)
	steps := []struct {
		after time.Duration
		err   error
		want  slog.Level
	}{
		{0, lost, slog.LevelWarn},
		{0, nats.ErrNoResponders, slog.LevelDebug},
		{time.Second, lost, slog.LevelDebug},
		{0, natsjs.ErrPinIDMismatch, slog.LevelWarn},
		{quietWarnEvery - 2*time.Second, nats.ErrNoResponders, slog.LevelDebug},
		{time.Second, lost, slog.LevelWarn},
		{time.Second, errors.New("something else"), slog.LevelWarn},
		{0, lost, slog.LevelDebug},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		if got := w.consumeErrLevel(s.err, &last); got != s.want {
			t.Errorf("step %d (%v): level %v, want %v", i, s.err, got, s.want)
		}
	}
}
