package publisher

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestReorderDetection checks the bookkeeping behind reordered_total: a
// failed row overtaken by a later row of its chat is at risk, and counts as
// reordered only if its retry is stored rather than reported a duplicate.
func TestReorderDetection(t *testing.T) {
	m, err := newMetrics(nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{metrics: m, atRisk: map[int64]struct{}{}, log: slog.New(slog.DiscardHandler)}
	r := &round{p: p}
	row := func(id, chat int64) outbox.Row {
		return outbox.Row{ID: id, ChatID: chat, Channel: "telegram", Recipient: strconv.FormatInt(chat, 10)}
	}

	// Round 1: rows 1 (chat A) and 3 (chat B) fail; row 2 (chat A) and
	// row 4 (chat C) are stored.
	r.noteAtRisk([]settled{
		{row(1, 10), false},
		{row(2, 10), true},
		{row(3, 20), false},
		{row(4, 30), true},
	})
	if _, ok := p.atRisk[1]; !ok || len(p.atRisk) != 1 {
		t.Fatalf("at risk = %v, want only row 1", p.atRisk)
	}

	// Round 2: row 1 turns out to be stored already: no reorder.
	r.noteAck(row(1, 10), ackResult{done: true, dup: true})
	if got := counterValue(t, m.reordered); got != 0 {
		t.Fatalf("reordered = %v after a duplicate, want 0", got)
	}
	if got := counterValue(t, m.duplicates); got != 1 {
		t.Fatalf("duplicates = %v, want 1", got)
	}

	// Same again, but now the retry is stored for the first time.
	r.noteAtRisk([]settled{{row(5, 10), false}, {row(6, 10), true}})
	r.noteAck(row(5, 10), ackResult{done: true, seq: 99})
	if got := counterValue(t, m.reordered); got != 1 {
		t.Fatalf("reordered = %v, want 1", got)
	}
	if len(p.atRisk) != 0 {
		t.Fatalf("at risk = %v, want empty", p.atRisk)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
