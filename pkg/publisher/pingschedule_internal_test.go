package publisher

import (
	"testing"
	"time"
)

// A wait for an acknowledgement pings soon, then less and less often, never
// more than a third of AckTimeout apart, and starts over after progress.
func TestPingSchedule(t *testing.T) {
	s := newPingSchedule(10 * time.Second)
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 10 * time.Second / 3, 10 * time.Second / 3}
	for i, w := range want {
		if got := s.after(); got != w {
			t.Fatalf("ping %d after %v, want %v", i+1, got, w)
		}
	}
	s.restart()
	if got := s.after(); got != firstPing {
		t.Errorf("after a restart the first ping comes after %v, want %v", got, firstPing)
	}
	// A short AckTimeout (tests) keeps its pings within a third of it.
	short := newPingSchedule(150 * time.Millisecond)
	for i := range 3 {
		if got := short.after(); got != 50*time.Millisecond {
			t.Errorf("AckTimeout 150ms: ping %d after %v, want 50ms", i+1, got)
		}
	}
}
