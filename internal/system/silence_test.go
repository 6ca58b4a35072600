package system_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

func TestSilences(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Deliveries every 100 ms until 1000, then nothing until 4000, then
	// 4100; a notification committed at 1500 waits until 4000, one
	// committed at 900 until 4100. Between 5000 and 9000 nothing is
	// delivered but nothing waits either.
	var ds []time.Time
	for ms := 0; ms <= 1000; ms += 100 {
		ds = append(ds, at(ms))
	}
	ds = append(ds, at(4000), at(4100), at(5000), at(9000))
	waits := []system.Wait{
		{From: at(-50), To: at(0)},
		{From: at(1500), To: at(4000)},
		{From: at(900), To: at(4100)},
		{From: at(4950), To: at(5000)},
		{From: at(8990), To: at(9000)},
	}
	got := system.Silences(waits, ds, time.Time{}, time.Time{})
	if len(got) == 0 {
		t.Fatal("no silence found")
	}
	if l := got[0]; !l.From.Equal(at(1000)) || !l.To.Equal(at(4000)) || l.Waiting != 2 {
		t.Errorf("longest silence: got %v to %v with %d waiting, want 1000 ms to 4000 ms with 2", l.From.Sub(t0), l.To.Sub(t0), l.Waiting)
	}
	for _, s := range got {
		if !s.From.Before(at(5000)) && !s.To.After(at(8990)) {
			t.Errorf("a silence while nothing waited: %v to %v", s.From.Sub(t0), s.To.Sub(t0))
		}
	}
	// The last gap is silent only from the commit at 8990.
	for _, s := range got {
		if s.To.Equal(at(9000)) && !s.From.Equal(at(8990)) {
			t.Errorf("the gap before 9000 ms is silent from %v, want from the commit at 8990 ms", s.From.Sub(t0))
		}
	}
	// A window clips.
	w := system.Silences(waits, ds, at(2000), at(3000))
	if len(w) != 1 || w[0].Duration() != time.Second {
		t.Errorf("silences within [2000, 3000] ms: %+v, want one of 1s", w)
	}
	if s := system.Silences(nil, ds, time.Time{}, time.Time{}); len(s) != 0 {
		t.Errorf("silences without waits: %+v, want none", s)
	}
}
