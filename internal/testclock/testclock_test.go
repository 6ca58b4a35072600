package testclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/testclock"
)

// The clock moves only when told, and is safe to read while it moves.
func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := testclock.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(400*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after 400 advances of 1ms Now() = %v, want %v", got, want)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("after Set Now() = %v, want %v", got, start)
	}
}
